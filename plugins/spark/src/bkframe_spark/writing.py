"""Writing for Spark: one new ledger per task, made visible by the driver's one commit.

A task appends its rows (records: payload, key, timestamp, properties; see
:mod:`bkframe_spark.columns`) to a ledger of its own (``VD_JOURNAL`` by default: BP-14's
bulk-load case, acknowledged before the fsync), then closes it -- a ``VD_JOURNAL`` close
syncs first, so the closed ledger holds every entry -- and hands the ledger id to the
driver in its commit message. Nothing is visible yet: the ledger is in no log. The
driver's commit appends all the tasks' ledgers to the log as consecutive segments in one
``commit_ledgers`` compare-and-set, with a token naming the write (a bulk load's id, or a
streaming query's id and batch id), so a commit retried after a timeout or replayed after
a driver crash lands once.

What must never be visible, and never stay behind: each task's ledger is *staged* in the
log record as soon as it is created (:meth:`bkframe.Logs.stage_ledger`, under the commit
token and the write's id), so the driver finds a write's ledgers in the log record, never by
listing the cluster's ledgers. The commit deletes the staged ledgers it leaves out (failed,
killed or speculative duplicate attempts, earlier runs of a streaming batch); an abort
discards the write's (:meth:`bkframe.Logs.discard_staged`). A task attempt that fails
deletes its own ledger before it gives up; one that comes after its write was committed or
aborted finds out when it stages, or when it has closed its ledger, and deletes it.
Ledgers also carry the write's id in their custom metadata (:data:`TAG_WRITE`), for people.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import attrs
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from bkframe import ENVELOPE_CUSTOM, Client, CommitResult, DigestType, LogMetadata, PendingAppend, WriteHandle
from bkframe.errors import BKError, LogError, LogExistsError, MetadataError, NoSuchLedgerError, NoSuchLogError
from bkframe_spark.columns import WriteColumns, encode_rows
from bkframe_spark.connection import ConnectorTimeoutError, call, check_bookies, client_for
from bkframe_spark.options import OptionError, Options

log = logging.getLogger("bkframe.spark")
T = TypeVar("T")

#: Custom metadata of every ledger a Spark write makes: the write it belongs to ...
TAG_WRITE = "bkframe.spark.write"
#: ... the token its commit uses (a streaming batch's, shared by every run of that batch) ...
TAG_TOKEN = "bkframe.spark.token"
#: ... and the log it is for.
TAG_LOG = "bkframe.spark.log"
#: Appends in flight per task, made in chunks.
WINDOW = 1024
CHUNK = 256
#: How often the driver tries a commit that timed out or hit a metadata store error.
COMMIT_ATTEMPTS = 5


@dataclass
class LedgerMessage(WriterCommitMessage):
    """A task's result: the ledger it wrote (None if its partition was empty)."""

    ledger_id: int | None
    entries: int
    size: int
    partition: int
    attempt: int
    #: The write's id (:data:`TAG_WRITE`): its staging group.
    write: str
    #: The smallest and largest timestamp (ms) of its records (-1: none written).
    min_ts: int = -1
    max_ts: int = -1


@attrs.frozen
class LedgerSpec:
    """How each task's ledger is made: the log's settings, with the write's ledger type."""

    log: str
    ensemble: int
    write_quorum: int
    ack_quorum: int
    ledger_type: str
    digest: DigestType
    password: bytes

    @classmethod
    def for_log(cls, client: Client, record: LogMetadata, ledger_type: str, password: bytes) -> LedgerSpec:
        s = record.settings
        policy = client.context.ledger_types.named(ledger_type)  # an unknown type fails here, on the driver
        ensemble = s.ensemble
        if policy.lac_by_sync and ensemble > s.write_quorum:
            # BP-14's LastAddSynced rule cannot stripe: keep the log's copies per entry, unstriped.
            ensemble = s.write_quorum
        return cls(record.name, ensemble, s.write_quorum, s.ack_quorum, ledger_type, s.digest, password)


class Sink:
    """A task's ledger: made at the first row, appended with a window of appends in flight."""

    def __init__(self, client: Client, spec: LedgerSpec, token: str, write: str, custom: dict[str, str]) -> None:
        self.client = client
        self.spec = spec
        self.token = token
        self.write = write
        self.custom = custom
        self.handle: WriteHandle | None = None
        #: The write was committed or aborted before this attempt made its ledger: it writes nothing.
        self.late = False
        self.pending: deque[list[PendingAppend]] = deque()
        self.in_flight = 0
        self.entries = 0
        self.size = 0
        self.min_ts = -1
        self.max_ts = -1

    async def append(self, data: Sequence[bytes], min_ts: int, max_ts: int) -> None:
        """Append entries (records in envelopes) whose timestamps run from ``min_ts`` to ``max_ts``."""
        if self.late:
            return
        if self.handle is None:
            s = self.spec
            self.handle = await self.client.create_ledger(
                ensemble=s.ensemble, write_quorum=s.write_quorum, ack_quorum=s.ack_quorum, ledger_type=s.ledger_type,
                digest=s.digest, password=s.password, custom=self.custom,
            )
            # Staged at once (an exception here deletes the ledger: see write_task).
            if not await self.client.logs.stage_ledger(s.log, self.handle.ledger_id, self.token, group=self.write,
                                                       password=s.password):
                await self.discard()
                self.handle, self.late = None, True
                return
        handle, pending = self.handle, self.pending
        # The ledger's time range becomes its segment's (commit_ledgers' time_bounds).
        self.min_ts = min_ts if self.entries == 0 else min(self.min_ts, min_ts)
        self.max_ts = max_ts if self.entries == 0 else max(self.max_ts, max_ts)
        # Appends made in one go leave as one ADD_BATCH per bookie; refilling the window one
        # entry at a time would send one message per entry (several times slower).
        for first in range(0, len(data), CHUNK):
            chunk = [handle.append_async(payload) for payload in data[first : first + CHUNK]]
            pending.append(chunk)
            self.in_flight += len(chunk)
            while self.in_flight > WINDOW:
                await self._wait_oldest()
        self.entries += len(data)
        self.size += sum(map(len, data))

    async def _wait_oldest(self) -> None:
        oldest = self.pending.popleft()
        for pending in oldest:
            await pending.wait()
        self.in_flight -= len(oldest)

    async def finish(self) -> None:
        """Wait for every append, then close (a VD_JOURNAL close syncs first)."""
        while self.pending:
            await self._wait_oldest()
        if self.handle is not None:
            await self.handle.close()

    async def discard(self) -> None:
        if self.handle is not None:
            try:
                await self.client.delete_ledger(self.handle.ledger_id)
            except NoSuchLedgerError:
                pass


def write_task(
    opts: Options, spec: LedgerSpec, write: str, token: str, columns: WriteColumns, batches: Iterator[pa.RecordBatch]
) -> LedgerMessage:
    """Write the task's rows to a new ledger, close it, return its id (in a task)."""
    ctx = TaskContext.get()
    partition, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
    bk = client_for(opts)
    what = f"task {partition} (attempt {attempt}) writing for log {spec.log!r}"
    custom = {
        TAG_WRITE: write, TAG_TOKEN: token, TAG_LOG: spec.log, "bkframe.spark.task": f"{partition}.{attempt}",
        # Its entries are records in envelopes: commit_ledgers makes it an enveloped segment.
        **ENVELOPE_CUSTOM,
    }
    sink = Sink(bk.client, spec, token, write, custom)
    try:
        for batch in batches:
            if batch.num_rows and not sink.late:
                # Each row a record in its envelope; rows without a timestamp get this batch's publish time.
                data, min_ts, max_ts = encode_rows(batch, columns, time.time_ns() // 1_000_000)
                call(bk, what, opts.timeout_s, sink.append, data, min_ts, max_ts)
        call(bk, what, opts.timeout_s, sink.finish)
        ledger_id = sink.handle.ledger_id if sink.handle is not None else None
        if ledger_id is not None and call(bk, what, opts.timeout_s, finished_without, bk.client, spec, token, write,
                                          ledger_id):
            # A late attempt: the write was committed with another attempt's ledger, or aborted.
            call(bk, what, opts.timeout_s, sink.discard)
            ledger_id = None
    except BaseException:
        try:
            call(bk, f"{what}: deleting its ledger", min(opts.timeout_s, 30.0), sink.discard)
        except Exception as e:  # noqa: BLE001 - it is staged: the driver's commit or abort deletes it
            log.warning("%s: could not delete ledger %s (staged: the driver's commit or abort will): %s",
                        what, sink.handle.ledger_id if sink.handle else None, e)
        raise
    return LedgerMessage(ledger_id, sink.entries, sink.size, partition, attempt, write, sink.min_ts, sink.max_ts)


async def finished_without(client: Client, spec: LedgerSpec, token: str, write: str, ledger_id: int) -> bool:
    """The write was committed without ``ledger_id``, or aborted: the ledger is not needed.
    Read after the ledger is closed: the commit or abort may have come while it was written.
    (The commit, or the abort, deleted it already: it was staged.)"""
    record = await client.logs.metadata(spec.log)
    if record.discarded(write):
        return True
    done = record.commit(token)
    return done is not None and ledger_id not in committed_ledgers(record, done.segments)


def committed_ledgers(record: LogMetadata, segments: Sequence[int]) -> set[int]:
    wanted = set(segments)
    return {s.ledger_id for s in record.segments if s.number in wanted}


# -- the driver: commit, abort ----------------------------------------------------------------


def message_ledgers(messages: Sequence[LedgerMessage | None]) -> list[int]:
    """The ledgers to commit, in partition order (so the log keeps the DataFrame's order)."""
    done = sorted((m for m in messages if m is not None and m.ledger_id is not None), key=lambda m: m.partition)
    return [m.ledger_id for m in done if m.ledger_id is not None]


async def _commit(
    client: Client, spec: LedgerSpec, ids: list[int], token: str, bounds: dict[int, tuple[int, int]]
) -> tuple[CommitResult, set[int]]:
    logs = client.logs
    result = await logs.commit_ledgers(spec.log, ids, token, password=spec.password, time_bounds=bounds)
    if not result.replayed:
        return result, set(ids)
    record = await logs.metadata(spec.log)
    return result, committed_ledgers(record, result.segments)


def commit_write(
    opts: Options, spec: LedgerSpec, token: str, messages: Sequence[LedgerMessage | None]
) -> CommitResult | None:
    """Append the tasks' ledgers to the log in one idempotent commit, which also deletes the
    ledgers staged for the token and left out (ledgers of failed or duplicate attempts, of
    earlier runs of a streaming batch). None when no task wrote anything (nothing is
    committed)."""
    bk = client_for(opts)
    ids = message_ledgers(messages)
    bounds = {
        m.ledger_id: (m.min_ts, m.max_ts) for m in messages if m is not None and m.ledger_id is not None and m.max_ts >= 0
    }
    what = f"committing {len(ids)} ledger(s) to log {spec.log!r} (token {token})"
    if not ids:
        return None
    result, committed = retrying(opts, what, _commit, bk.client, spec, ids, token, bounds)
    if result.replayed:
        # Committed before (a replayed batch): this run's ledgers were refused staging and
        # dropped by their tasks, but a ledger staged just before that commit may be here.
        delete_extra(opts, what, token, [i for i in ids if i not in committed])
    return result


def retrying(opts: Options, what: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``call`` a commit, again after a timeout or a metadata store error: a commit is
    idempotent per token, so trying again after an unknown outcome is safe."""
    bk = client_for(opts)
    delay = 0.5
    for attempt in range(COMMIT_ATTEMPTS):
        try:
            return call(bk, what, opts.timeout_s, fn, *args)
        except (ConnectorTimeoutError, MetadataError) as e:
            if isinstance(e, LogError) or attempt == COMMIT_ATTEMPTS - 1:
                raise
            log.warning("%s failed (attempt %d, retrying): %s", what, attempt + 1, e)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def delete_extra(opts: Options, what: str, token: str, extra: Sequence[int]) -> None:
    """Delete the ledgers of a run whose token was committed before (a replayed batch)."""
    log.info("%s: committed before (a replayed batch); its new ledgers %s are deleted", what, list(extra))
    bk = client_for(opts)
    for ledger_id in extra:
        try:
            call(bk, f"{what}: deleting ledger {ledger_id}", opts.timeout_s, bk.client.delete_ledger, ledger_id)
        except NoSuchLedgerError:
            pass
        except BKError as e:
            log.warning("%s: could not delete ledger %d (tagged %s=%s): %s", what, ledger_id, TAG_TOKEN, token, e)


def abort_write(opts: Options, spec: LedgerSpec, token: str, write: str) -> None:
    """Delete every ledger the write staged and did not commit; tasks still running find
    the write discarded when they stage or finish, and delete their own."""
    bk = client_for(opts)
    what = f"aborting the write to log {spec.log!r} (token {token})"
    try:
        deleted = call(bk, what, opts.timeout_s, _discard, bk.client, spec, write)
    except BKError as e:
        log.warning("%s: discarding its staged ledgers failed (they carry %s=%s): %s", what, TAG_WRITE, write, e)
        return
    if deleted:
        log.info("%s: deleted %d ledger(s) of its tasks: %s", what, len(deleted), deleted)


async def _discard(client: Client, spec: LedgerSpec, write: str) -> list[int]:
    # Only this write's own ledgers: a later run of the same streaming batch may still commit its own.
    return await client.logs.discard_staged(spec.log, write, password=spec.password)


def check_write(opts: Options) -> LedgerSpec:
    """On the driver, before any task runs: the log exists, the password is right, the
    ledger type is known, its bookies accept this client (when it has an entry to read);
    returns how tasks make ledgers."""
    name = opts.need_log("writing")
    bk = client_for(opts)

    async def plan() -> LedgerSpec:
        client = bk.client
        try:
            record = await client.logs.metadata(name)
        except NoSuchLogError:
            if not opts.create_log:
                raise NoSuchLogError(
                    name, f"log {name!r} does not exist: create it ('bkframe log create {name}') or drop createLog=false"
                ) from None
            try:
                record = await client.logs.create(name, password=opts.password)
                log.info("created log %r (default settings) for a Spark write", name)
            except LogExistsError:  # another writer made it meanwhile
                record = await client.logs.metadata(name)
        await client.logs.reader(name, password=opts.password)  # checks the password
        last = next((s for s in reversed(record.segments) if s.closed and s.entries > 0), None)
        if last is not None:
            await check_bookies(client, last.ledger_id, last.last_entry_id, opts.password)
        return LedgerSpec.for_log(client, record, opts.ledger_type, opts.password)

    try:
        return call(bk, f"planning the write to log {name!r}", opts.timeout_s, plan)
    except BKError:
        raise
    except ValueError as e:
        raise OptionError(f"option 'ledgerType': {e}") from None


