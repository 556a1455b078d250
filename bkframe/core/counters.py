"""Bookie counters, reported by GET_BOOKIE_INFO and ``bkframe bench appends``.

One mutable object per bookie, handed to every plugin factory so that storage plugins
count their own bytes and fsyncs. Plain ints: the bookie is one trio thread, and the
worker threads that fsync only hand results back to it.
"""

from __future__ import annotations

import bisect

import attrs

#: Upper bounds (seconds) of the latency buckets: 100 us to 10 s.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)
#: Upper bounds (bytes) of the size buckets: 1 KiB to 16 MiB.
SIZE_BUCKETS: tuple[float, ...] = tuple(float(1024 * 4**i) for i in range(8))


@attrs.define(eq=False)  # identity: a batch lists the histograms it ends once each
class Histogram:
    """A fixed-bucket histogram of plain numbers, read by the metrics collector at scrape
    time: the bookie's parts observe into it without importing prometheus."""

    buckets: tuple[float, ...] = LATENCY_BUCKETS
    #: Observations per bucket (not cumulative); the last one is above every bound (+Inf).
    counts: list[int] = attrs.Factory(lambda self: [0] * (len(self.buckets) + 1), takes_self=True)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += times
        self.total += value * times
        self.count += times


@attrs.define
class Counters:
    entries_added: int = 0
    entries_read: int = 0
    #: Of those, entries sent in READ_BATCH answers.
    entries_read_in_batches: int = 0
    journal_bytes_written: int = 0
    journal_fsyncs: int = 0
    storage_bytes_written: int = 0
    storage_fsyncs: int = 0
    fenced_ledgers: int = 0
    write_closed_ledgers: int = 0
    requests: int = 0
    bad_requests: int = 0
    checkpoints: int = 0
    gc_ledgers_deleted: int = 0
    gc_bytes_freed: int = 0
    compacted_bytes: int = 0
    #: Adds answered IO_ERROR because ledger storage could not store them.
    storage_write_errors: int = 0
    #: Requests answered TOO_MANY_REQUESTS because the bookie had no file descriptor left
    #: to open an index or entry log (even after closing what its caches could).
    out_of_files_refusals: int = 0
    #: Index records dropped because the entry-log bytes they point to are gone (a power
    #: cut lost the log's unsynced tail): found at open or by compaction.
    storage_entries_dropped: int = 0
    #: Journal groups lost to a write that found no space (their requests failed).
    journal_write_failures: int = 0
    #: Adds refused because the bookie is read-only.
    read_only_refusals: int = 0
    #: Fences and recovery adds served a second time because their first write found no
    #: space (it released the reserved space they were then written into).
    duties_served_again: int = 0
    #: Adds and fencing reads answered TRY_AGAIN: the metadata store had not vouched for the
    #: key of a ledger new here within ``key_check_wait_s`` (the client sends them again).
    key_checks_pending: int = 0
    #: Large PD entries written once: entry log fsynced before the ack, a STORED record
    #: (their location) in the journal instead of their data.
    entries_written_once: int = 0
    #: STORED journal records whose entry-log record was not the entry at replay (never
    #: acknowledged: torn by the crash); not indexed.
    stored_entries_unreadable: int = 0
    #: Bytes appended to the journal and not yet handed to its group write (a gauge).
    journal_queued_bytes: int = 0
    #: Connections open now (a gauge), and connections refused at accept by a ``[limits]`` cap.
    connections_open: int = 0
    connections_refused: int = 0
    #: Connections closed before they authenticated: a failed AUTH, no AUTH in time, or a
    #: frame larger than one before AUTH may be.
    connections_closed_unauthenticated: int = 0
    #: Connections closed because the client sent too slowly (a frame not whole in
    #: ``frame_timeout_s``) or read too slowly (an answer not taken in ``send_timeout_s``).
    connections_closed_slow: int = 0
    #: Long polls waiting now (a gauge), and long polls answered at once because a cap was met.
    long_polls_waiting: int = 0
    long_polls_refused: int = 0
    #: Bytes of requests read (or being read) and not answered yet, with their answers (a gauge).
    inflight_bytes: int = 0
    #: Seconds each journal group took to write and fsync, and its size in bytes.
    journal_fsync_latency: Histogram = attrs.Factory(Histogram)
    journal_group_bytes: Histogram = attrs.Factory(lambda: Histogram(SIZE_BUCKETS))
    #: Seconds from reading a request frame to sending its answers, by ledger type name:
    #: one observation per frame that held adds (reads), not one per entry.
    add_latency: dict[str, Histogram] = attrs.Factory(dict)
    read_latency: dict[str, Histogram] = attrs.Factory(dict)

    @property
    def fsyncs(self) -> int:
        return self.journal_fsyncs + self.storage_fsyncs

    def as_dict(self) -> dict[str, int]:
        """The plain counts (the histograms are for the metrics endpoint)."""
        d = {k: v for k, v in attrs.asdict(self, recurse=False).items() if isinstance(v, int)}
        d["fsyncs"] = self.fsyncs
        return d


@attrs.define
class ClientCounters:
    """What one client has done, for its metrics (:func:`bkframe.client.metrics.client_registry`)."""

    #: Seconds from ``append`` to its confirmation, one observation per entry.
    add_latency: Histogram = attrs.Factory(Histogram)
    #: Ensemble changes this client's writers committed (a new fragment each).
    ensemble_changes: int = 0
    #: Ledgers this client recovered (fenced, found the end of, closed), and recoveries that failed.
    recoveries: int = 0
    recovery_failures: int = 0
    #: Requests sent again to the same bookie after it answered TRY_AGAIN (its metadata
    #: store had not vouched for a new ledger's key yet; see bkframe/client/bookies/connection.py).
    tries_again: int = 0
