"""Writes that route each row to the log its ``log`` column names: several logs, one commit.

A DataFrame with a string ``log`` column, written with no ``log`` option (Kafka's sink and
its ``topic`` column, the same way round: the option, when given, wins and the column is
ignored), goes to the logs its rows name. Each task writes one ledger per log it sees,
exactly as a write of one log does (:mod:`bkframe_spark.writing`): made at that log's first
row with the log's settings, **staged** in that log under the write's token and group
at once, closed at the end. Its commit message lists each log with its ledger.

The driver publishes all of them with **one** ``Logs.commit_many`` under the write's token
(a bulk load's id, or a streaming query's id and batch id): one atomic step of the
metadata store (``update_logs``) -- every log gets its segments, or none does -- and
idempotent per token across the logs, so a streaming batch replayed after a driver crash
changes nothing in any log. A log whose stage was refused in a task (its token committed
already: a replay) is in the commit too, with no ledger: a replay that routed rows to a
log the first run did not touch then fails the commit (the token is in some of its logs
only) instead of writing those rows a second time.

An abort discards the write's staged ledgers in every log it touched: those named by the
tasks that reported, and those where a failed task staged a ledger -- found by reading
each log's record, since a failed task reports nothing (aborts are rare; this is their cost).

A log that does not exist is created by the task that first meets it, with default settings
and the write's password, unless ``createLog=false`` (then that task fails, naming it): the
driver cannot know the logs before the tasks have read the rows.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StringType, StructType

from bkframe import ENVELOPE_CUSTOM, Client, CommitResult, check_name
from bkframe.errors import BKError, LogExistsError, NoSuchLogError
from bkframe_spark.columns import DataError, WriteColumns, encode_rows
from bkframe_spark.connection import call, client_for, task_starts
from bkframe_spark.first_line import message_first
from bkframe_spark.options import OptionError, Options
from bkframe_spark.streaming import batch_ids, stream_batch, stream_token
from bkframe_spark.writing import (
    TAG_LOG,
    TAG_TOKEN,
    TAG_WRITE,
    LedgerSpec,
    Sink,
    committed_ledgers,
    delete_extra,
    retrying,
)

log = logging.getLogger("bkframe.spark")


@dataclass
class RoutedLedger:
    """A task's ledger for one log (``ledger_id`` None: its stage was refused, a replay)."""

    log: str
    ledger_id: int | None
    entries: int
    size: int
    #: The smallest and largest timestamp (ms) of its records (-1: none written).
    min_ts: int = -1
    max_ts: int = -1


@dataclass
class RoutedMessage(WriterCommitMessage):
    """A task's result: a ledger per log its rows named."""

    partition: int
    attempt: int
    #: The write's id: the staging group of every ledger of the write.
    write: str
    ledgers: list[RoutedLedger] = field(default_factory=list)


def routes_rows(opts: Options, schema: StructType, columns: WriteColumns) -> bool:
    """Whether a write routes rows by their ``log`` column (no ``log`` option, a ``log``
    column); mistakes in between are errors that say what to do."""
    if opts.log_pattern is not None:
        raise OptionError(
            "option 'logPattern' is for reads; a write goes to option 'log', or routes each row to the log its "
            "'log' column names"
        )
    if opts.ledgers:
        raise OptionError("option 'ledgers' is for batch reads; a write goes to option 'log', or by a 'log' column")
    if opts.logs or columns.log is None:
        return False  # one log: option 'log' (with several names or none, check_write says what is wrong)
    kind = schema.fields[columns.log].dataType
    if not isinstance(kind, StringType):
        raise DataError(
            f"column 'log' is {kind.simpleString()}; a write routes each row to the log its string 'log' column names "
            "(cast it, or give option 'log' to write every row to one log)"
        )
    return True


def check_routing(opts: Options) -> str:
    """On the driver, before any task runs: the metadata store answers and the ledger type
    is known (the logs are known only when tasks read the rows). Returns the ledger type."""
    bk = client_for(opts)

    async def check() -> str:
        bk.client.context.ledger_types.named(opts.ledger_type)  # an unknown type fails here
        await bk.client.logs.list_logs()  # the metadata store is there
        return opts.ledger_type

    return call(bk, "planning a write routed by the 'log' column", opts.timeout_s, check)


def split_by_log(batch: pa.RecordBatch, index: int) -> dict[str, pa.RecordBatch]:
    """The batch's rows by the log in column ``index``, in their order within each log;
    :class:`DataError` for a null or a bad name."""
    names = batch.column(index)
    if names.null_count:
        row = int(np.flatnonzero(names.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(
            f"column 'log' is null in a row ({row} of a batch of {len(names)}): each row names the log it goes to "
            "(fill it, e.g. coalesce(log, 'other'), or give option 'log' to write every row to one log)"
        )
    codes = pc.dictionary_encode(names)
    for name in codes.dictionary.to_pylist():
        try:
            check_name(name)
        except ValueError as e:
            raise DataError(f"column 'log': {e}; it names the log each row is written to") from None
    if len(codes.dictionary) == 1:
        return {codes.dictionary[0].as_py(): batch}
    indices = codes.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(indices, kind="stable")  # each log's rows together, in their order
    cuts = np.flatnonzero(np.diff(indices[order])) + 1
    return {
        codes.dictionary[int(indices[rows[0]])].as_py(): batch.take(pa.array(rows))
        for rows in np.split(order, cuts)
    }


async def prepare_log(client: Client, opts: Options, ledger_type: str, name: str) -> LedgerSpec:
    """How a task makes its ledger for ``name`` (the log's settings), creating the log first
    if it does not exist and ``createLog`` allows; checks the password."""
    try:
        reader = await client.logs.reader(name, password=opts.password)
    except NoSuchLogError:
        if not opts.create_log:
            raise NoSuchLogError(
                name,
                f"log {name!r} (named in column 'log') does not exist: create it ('bkframe log create {name}') or "
                f"drop createLog=false",
            ) from None
        try:
            await client.logs.create(name, password=opts.password)
            log.info("created log %r (default settings) for a Spark write routed by its 'log' column", name)
        except LogExistsError:  # another task made it meanwhile
            pass
        reader = await client.logs.reader(name, password=opts.password)
    return LedgerSpec.for_log(client, reader.metadata, ledger_type, opts.password)


def route_task(
    opts: Options, ledger_type: str, write: str, token: str, columns: WriteColumns, batches: Iterator[pa.RecordBatch]
) -> RoutedMessage:
    """Write the task's rows to a new ledger per log they name, close them, return them (in a task)."""
    ctx = TaskContext.get()
    partition, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
    bk = client_for(opts)
    what = f"task {partition} (attempt {attempt}) writing rows routed by their 'log' column"
    assert columns.log is not None
    sinks: dict[str, Sink] = {}
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            now = time.time_ns() // 1_000_000  # the publish time of rows without a timestamp
            for name, rows in split_by_log(batch, columns.log).items():
                sink = sinks.get(name)
                if sink is None:
                    spec = call(bk, f"{what}: preparing log {name!r}", opts.timeout_s, prepare_log, bk.client, opts,
                                ledger_type, name)
                    custom = {TAG_WRITE: write, TAG_TOKEN: token, TAG_LOG: name,
                              "bkframe.spark.task": f"{partition}.{attempt}", **ENVELOPE_CUSTOM}
                    sink = sinks[name] = Sink(bk.client, spec, token, write, custom)
                if not sink.late:
                    data, min_ts, max_ts = encode_rows(rows, columns, now)
                    call(bk, f"{what} (log {name!r})", opts.timeout_s, sink.append, data, min_ts, max_ts)
        for name, sink in sorted(sinks.items()):
            call(bk, f"{what} (log {name!r})", opts.timeout_s, sink.finish)
        late = call(bk, what, opts.timeout_s, not_needed, bk.client, sinks, token, write)
        ledgers = []
        for name, sink in sorted(sinks.items()):
            ledger_id = sink.handle.ledger_id if sink.handle is not None else None
            if ledger_id is not None and name in late:
                # A late attempt: the write was committed with another attempt's ledger, or aborted.
                call(bk, what, opts.timeout_s, sink.discard)
                ledger_id = None
            entries, size = (sink.entries, sink.size) if ledger_id is not None else (0, 0)
            ledgers.append(RoutedLedger(name, ledger_id, entries, size, sink.min_ts, sink.max_ts))
    except BaseException:
        for name, sink in sinks.items():
            try:
                call(bk, f"{what}: deleting its ledger for log {name!r}", min(opts.timeout_s, 30.0), sink.discard)
            except Exception as e:  # noqa: BLE001 - it is staged: the driver's commit or abort deletes it
                log.warning("%s: could not delete ledger %s of log %r (staged: the driver's commit or abort will): %s",
                            what, sink.handle.ledger_id if sink.handle else None, name, e)
        raise
    return RoutedMessage(partition, attempt, write, ledgers)


async def not_needed(client: Client, sinks: dict[str, Sink], token: str, write: str) -> set[str]:
    """The logs whose ledger this attempt drops, read after the ledgers are closed (the
    commit or abort may have come meanwhile): those where the token was committed without
    it (a late or duplicate attempt), or all of them if the write was aborted -- a write is
    committed or aborted whole, so a discard mark in any of its logs says so, even where the
    abort found nothing staged when it passed."""
    drop: set[str] = set()
    aborted = False
    for name, sink in sinks.items():
        record = await client.logs.metadata(name)
        aborted = aborted or record.discarded(write)
        done = record.commit(token)
        if sink.handle is not None and done is not None:
            if sink.handle.ledger_id not in committed_ledgers(record, done.segments):
                drop.add(name)
    return set(sinks) if aborted else drop


# -- the driver: commit, abort ----------------------------------------------------------------


def routed_ledgers(messages: Sequence[RoutedMessage | None]) -> tuple[dict[str, list[int]], dict[int, tuple[int, int]]]:
    """Each log the tasks wrote (or were refused) with its ledgers in partition order, and
    each ledger's time range."""
    lists: dict[str, list[int]] = {}
    bounds: dict[int, tuple[int, int]] = {}
    for m in sorted((m for m in messages if m is not None), key=lambda m: m.partition):
        for ledger in m.ledgers:
            ids = lists.setdefault(ledger.log, [])
            if ledger.ledger_id is not None:
                ids.append(ledger.ledger_id)
                if ledger.max_ts >= 0:
                    bounds[ledger.ledger_id] = (ledger.min_ts, ledger.max_ts)
    return {name: lists[name] for name in sorted(lists)}, bounds


async def _commit_many(
    client: Client, opts: Options, lists: dict[str, list[int]], token: str, bounds: dict[int, tuple[int, int]]
) -> tuple[dict[str, CommitResult], set[int]]:
    logs = client.logs
    results = await logs.commit_many(lists, token, password=opts.password, time_bounds=bounds)
    if not any(r.replayed for r in results.values()):
        return results, {i for ids in lists.values() for i in ids}
    committed: set[int] = set()
    for name, result in results.items():
        committed |= committed_ledgers(await logs.metadata(name), result.segments)
    return results, committed


def commit_routed(opts: Options, token: str, messages: Sequence[RoutedMessage | None]) -> dict[str, CommitResult]:
    """Publish every task's ledgers in their logs with one atomic, idempotent ``commit_many``
    (which deletes, in each log, the ledgers staged under the token and left out). Nothing
    when no task wrote a ledger (a replay whose every stage was refused, or no rows)."""
    lists, bounds = routed_ledgers(messages)
    count = sum(map(len, lists.values()))
    if not count:
        return {}
    what = f"committing {count} ledger(s) to logs {', '.join(lists)} (token {token})"
    bk = client_for(opts)
    results, committed = retrying(opts, what, _commit_many, bk.client, opts, lists, token, bounds)
    if any(r.replayed for r in results.values()):
        delete_extra(opts, what, token, [i for ids in lists.values() for i in ids if i not in committed])
    return results


def abort_routed(opts: Options, token: str, write: str, messages: Sequence[RoutedMessage | None]) -> None:
    """Discard the write's staged ledgers in every log it touched (see the module's text);
    tasks still running find the write discarded when they stage or finish, and delete their
    own. Best effort: what fails is logged (the ledgers carry the write's id)."""
    bk = client_for(opts)
    what = f"aborting the write routed by the 'log' column (token {token})"
    known = set(routed_ledgers(messages)[0])
    try:
        others = sorted(set(call(bk, f"{what}: listing logs", opts.timeout_s, bk.client.logs.list_logs)) - known)
    except BKError as e:
        log.warning("%s: listing the logs failed; only %s are cleaned: %s", what, sorted(known), e)
        others = []
    for name in others + sorted(known):
        try:
            deleted = call(bk, f"{what}: log {name!r}", opts.timeout_s, _discard, bk.client, opts, name, write,
                           name in known)
        except NoSuchLogError:
            continue
        except BKError as e:
            log.warning("%s: discarding its staged ledgers in log %r failed (they carry %s=%s): %s",
                        what, name, TAG_WRITE, write, e)
            continue
        if deleted:
            log.info("%s: deleted %d ledger(s) of its tasks in log %r: %s", what, len(deleted), name, deleted)


async def _discard(client: Client, opts: Options, name: str, write: str, known: bool) -> list[int]:
    # A log no task reported is read first: most logs have nothing of this write, and a
    # discard marks the log (a token of its history), so only logs with a staged ledger get one.
    if not known and not any(s.group == write for s in (await client.logs.metadata(name)).staged):
        return []
    return await client.logs.discard_staged(name, write, password=opts.password)


class RoutingWriter(DataSourceArrowWriter):
    """``df.write.format("bkframe").mode("append").save()`` of a DataFrame with a ``log`` column."""

    def __init__(self, opts: Options, ledger_type: str, columns: WriteColumns) -> None:
        self.opts = opts
        self.ledger_type = ledger_type
        self.columns = columns
        #: The write's id: the staging group of its ledgers and (in the token) its commit's.
        self.write_id = uuid.uuid4().hex
        self.token = f"spark:write:{self.write_id}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RoutedMessage:  # type: ignore[override]
        task_starts()
        return route_task(self.opts, self.ledger_type, self.write_id, self.token, self.columns, iterator)

    @message_first
    def commit(self, messages: list[RoutedMessage | None]) -> None:  # type: ignore[override]
        commit_routed(self.opts, self.token, messages)

    @message_first
    def abort(self, messages: list[RoutedMessage | None]) -> None:  # type: ignore[override]
        abort_routed(self.opts, self.token, self.write_id, messages)


class RoutingStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("bkframe")`` of rows with a ``log`` column: exactly once per
    batch across all the logs the batch touches."""

    def __init__(self, opts: Options, ledger_type: str, columns: WriteColumns) -> None:
        self.opts = opts
        self.ledger_type = ledger_type
        self.columns = columns
        #: Tells this run's writes from a replay's (after a restart) of the same batch.
        self.run = uuid.uuid4().hex[:12]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RoutedMessage:  # type: ignore[override]
        token, write = stream_batch(self.run)
        task_starts()
        return route_task(self.opts, self.ledger_type, write, token, self.columns, iterator)

    @message_first
    def commit(self, messages: list[RoutedMessage | None], batchId: int) -> None:  # type: ignore[override]
        ids = batch_ids(messages)
        if ids is not None:
            # The commit deletes what earlier runs of this batch staged under its token.
            commit_routed(self.opts, stream_token(ids[0], batchId), messages)

    @message_first
    def abort(self, messages: list[RoutedMessage | None], batchId: int) -> None:  # type: ignore[override]
        ids = batch_ids(messages)
        if ids is not None:
            abort_routed(self.opts, stream_token(ids[0], batchId), ids[1], messages)
