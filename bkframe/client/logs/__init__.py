"""Named logs: unbounded streams made of ledgers (DistributedLog's log segments, Pulsar's
managed ledger), on top of the ledger client.

:mod:`.model` (positions, segments, the log's metadata record, cursors), :mod:`.api`
(:class:`~bkframe.client.logs.api.Logs`, what a caller uses), :mod:`.writer` (the one
fenced writer, rollover), :mod:`.reader` (snapshots, reads, tailing). See docs/logs.md.
"""
