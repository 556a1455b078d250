"""Python's cyclic garbage collector in a bookie process.

CPython's collector stops the process while it walks the objects it tracks, and a full
(generation 2) collection walks all of them: in a bookie holding 3x10^4 ledgers that was
up to 49 ms on this project's 2-core machine, ~150 ms at 10^5 -- the event loop held that
long, every request and heartbeat late by as much (issue 27: no step may hold it more
than 50 ms). Most of those objects live as long as the process: the modules, and each
ledger's state in the storage's table.

:func:`settle` is called once the storage is loaded and before the bookie serves: one full
collection, then ``gc.freeze()`` moves every surviving object to the permanent generation,
which later collections do not walk. Frozen objects are still freed by reference counting;
only a reference cycle among them would never be collected, and what exists at that point
(modules, the storage's table) lives until the process ends anyway.

The young generations' threshold is raised too: a bookie allocates a few objects per
request and frees almost all of them by reference counting, so a collection every 700
allocations (CPython's default) mostly walks objects that are about to be freed anyway.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("bkframe.bookie")

#: Allocations (net of frees) between two young collections; CPython's default is 700.
YOUNG_THRESHOLD = 20_000


def settle() -> None:
    """Collect once and freeze what survives (see the module docstring). Blocking: call it
    before serving, where a pause costs no request anything."""
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    log.debug("python gc settled in %.0f ms: %d objects frozen", (time.perf_counter() - start) * 1000, gc.get_freeze_count())
