"""The benchmarks behind ``bkframe bench ...``, one module per subject.

- :mod:`.appends`: pipelined adds to one bookie, or appends through the client (``bench appends``);
  its :func:`~.appends.append_timed` is the timed append loop the others reuse;
- :mod:`.sweep`: entry sizes x ledger types x windows, round-trip floors and peers
  (``bench sweep``), drawn by :mod:`.plots`;
- :mod:`.backends`: the client under asyncio and under trio (``bench backends``);
- :mod:`.logs`: a named log that rolls over vs one ledger (``bench log``);
- :mod:`.scale_bookie`, :mod:`.scale_metadata`: the scale targets of docs/scaling.md for
  one bookie and for the metadata store (``bench scale bookie|metadata``);
- :mod:`.autorecovery`: re-replicating a lost bookie (``bench autorecovery``).

The command group is registered by :mod:`bkframe.cli.bench`; bookie processes come from
:mod:`bkframe.launcher`. Only the command line and the tests import this package. Scripts
that measure one question once (latency per add, scaling, large entries, Spark) live in
``benchmarks/`` at the top of the repository; the figures, in docs/benchmarks/.
"""
