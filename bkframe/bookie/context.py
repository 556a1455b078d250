"""What answering requests and checkpointing need of a bookie -- and nothing more.

A :class:`BookieContext` is made once per bookie by :class:`~bkframe.bookie.bookie.Bookie`
and shared by the request handlers (:mod:`bkframe.bookie.requests` and the :mod:`bkframe.bookie.adds`, :mod:`bkframe.bookie.reads`
and :mod:`bkframe.bookie.ledger_control` it dispatches to) and the
:class:`~bkframe.bookie.durability.checkpoint.Checkpointer`. They never see the Bookie itself, so the
bookie module imports them and nothing of them imports it back.
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import trio

from bkframe.bookie.durability import journal_records as jr
from bkframe.bookie.durability.sync_cursor import SyncTracker
from bkframe.bookie.durability.tombstones import Tombstones
from bkframe.bookie.key_check import KeyCheck
from bkframe.bookie.lac_waiters import LacWaiters
from bkframe.bookie.response_batch import ResponseBatch
from bkframe.bookie.runtime.read_only_mode import ReadOnlyMode
from bkframe.bookie.runtime.throttled_log import ThrottledWarning
from bkframe.bookie.subscription_calls import NotHosted, SubscriptionCalls
from bkframe.core.counters import Counters, Histogram
from bkframe.core.interfaces.durability import DurabilityPolicy
from bkframe.core.interfaces.journal import Journal
from bkframe.core.interfaces.ledger_storage import LedgerState, LedgerStorage, WriteOnceStorage
from bkframe.proto.codes import Status
from bkframe.storage_kit.disk_full import is_disk_full
from bkframe.storage_kit.open_files import is_out_of_files

#: One line per interval however many requests find no file descriptor.
_OUT_OF_FILES = ThrottledWarning(logging.getLogger("bkframe.bookie"))


def _write_once(context: BookieContext) -> WriteOnceStorage | None:
    storage = context.storage
    return storage if isinstance(storage, WriteOnceStorage) and storage.large_entry_bytes > 0 else None


@attrs.define(eq=False)
class BookieContext:
    journal: Journal
    storage: LedgerStorage
    counters: Counters
    #: The ledger types this bookie serves, by wire id.
    types_by_id: dict[int, DurabilityPolicy]
    #: BookKeeper's read-only mode: on a full disk, no adds (reads, fences and recovery go on).
    mode: ReadOnlyMode
    #: Ledgers garbage collection deleted: never created again by an add or a fence.
    tombstones: Tombstones
    #: BP-14 sync cursors of the ledgers acknowledged before their fsync.
    sync: SyncTracker
    data_dir: Path
    #: Named in refusals; the service sets it once the bookie listens (if the config names none).
    bookie_id: str
    #: Whether the metadata store vouches for a key of a ledger this bookie holds no key for
    #: (set by the service when there is a metadata store). None: a bookie without a store,
    #: which takes the first add's key and fences only ledgers it holds (docs/security.md).
    key_check: KeyCheck | None = None
    #: Long polls waiting for a ledger's LAC to move.
    lac_waiters: LacWaiters = attrs.field(
        init=False, default=attrs.Factory(lambda self: LacWaiters(self.storage, self.counters), takes_self=True)
    )
    #: What serves SUB_* requests (:mod:`bkframe.bookie.subscription_calls`): the service sets
    #: the host once it runs; until then, and without one, they are refused NOT_OWNER.
    subscriptions: SubscriptionCalls = attrs.field(init=False, factory=NotHosted)
    #: The storage, if it can write large PD entries once (and is configured to).
    write_once: WriteOnceStorage | None = attrs.field(
        init=False, default=attrs.Factory(_write_once, takes_self=True)
    )

    def journal_write_failed(self, error: BaseException) -> None:
        if is_disk_full(error):
            self.mode.write_failed(error)

    def lost_status(self) -> Status:
        """The status of a request whose journal record was lost."""
        return Status.READ_ONLY if self.mode.read_only else Status.IO_ERROR

    def lost_write(self, error: BaseException, what: str) -> tuple[Status, str]:
        """Status and message for requests whose write (``what``) failed: nothing of them
        is durable here (a full disk turns the bookie read-only)."""
        self.journal_write_failed(error)
        message = f"bookie {self.bookie_id}: {what} failed ({error}); nothing of this request is durable here"
        return self.lost_status(), message

    def no_space(self, error: BaseException, what: str) -> tuple[Status, str]:
        self.mode.write_failed(error)
        return Status.READ_ONLY, f"bookie {self.bookie_id} has no space {what} ({error}); it is read-only now"

    def refusal_for(self, error: BaseException, what: str) -> tuple[Status, str] | None:
        """TOO_MANY_REQUESTS for a request the storage failed for want of file descriptors
        (nothing is wrong with the data: try later, or another bookie); None for any other
        error. Logged as a throttled warning."""
        if not is_out_of_files(error):
            return None
        self.counters.out_of_files_refusals += 1
        _OUT_OF_FILES.warn(
            "bookie %s: no file descriptor left for %s (%s); answered TOO_MANY_REQUESTS", self.bookie_id, what, error
        )
        return Status.TOO_MANY_REQUESTS, f"bookie {self.bookie_id} has no file descriptor left for {what} now; retry"

    def read_only_refusal(self, what: str) -> str:
        self.counters.read_only_refusals += 1
        until = "it is no longer decommissioned" if self.mode.draining else "its disk usage is below disk_usage_lwm"
        return f"bookie {self.bookie_id} is read-only ({self.mode.reason}); it refuses {what} until {until}"

    def journal_master_key(self, ledger_id: int, state: LedgerState, batch: ResponseBatch) -> None:
        """Journal the ledger's (new) master key; the batch's answers wait for it."""
        seq = self.journal.append(jr.master_record(ledger_id, state.ledger_type, state.master_key), ledger_id)
        batch.wait_seq = max(batch.wait_seq, seq)

    def observe(self, batch: ResponseBatch) -> None:
        """A deferred answer (one that waited for a key check) is ready: observe the request
        latencies its batch timed (the server observes those of the batches it sends)."""
        now = trio.current_time()
        for histogram in batch.timed:
            histogram.observe(now - batch.received)

    def timed(self, batch: ResponseBatch, by_type: dict[str, Histogram], ledger_type: int) -> None:
        """The batch's answer ends a request of this ledger type timed in ``by_type``."""
        policy = self.types_by_id.get(ledger_type)
        name = policy.name if policy is not None else str(ledger_type)
        histogram = by_type.get(name)
        if histogram is None:
            histogram = by_type[name] = Histogram()
        if histogram not in batch.timed:
            batch.timed.append(histogram)
