"""The PySpark data source ``bkframe``: batch reads, bulk loads, streaming source and sink.

Spark finds it with no registration call: the distribution ships the module
``pyspark_bkframe`` whose ``DefaultSource`` is :class:`BkframeDataSource`, and Spark >= 4
registers every such module on the Python path (SPARK-45917).
``spark.dataSource.register(BkframeDataSource)`` works as well.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from bkframe_spark.columns import WriteColumns
from bkframe_spark.connection import call, client_for, task_starts
from bkframe_spark.first_line import message_first
from bkframe_spark.logsets import describe
from bkframe_spark.options import OptionError, Options
from bkframe_spark.reading import (
    ARROW_SCHEMA,
    OFFSET_BITS,
    SCHEMA,
    EntryRange,
    check_schema,
    plan_ledgers,
    plan_logs,
    read_partition,
    split,
)
from bkframe_spark.routing import RoutingStreamWriter, RoutingWriter, check_routing, routes_rows
from bkframe_spark.streaming import LogStreamReader, LogStreamWriter
from bkframe_spark.writing import LedgerMessage, LedgerSpec, abort_write, check_write, commit_write, write_task

FORMAT = "bkframe"


class BkframeDataSource(DataSource):
    """``spark.read.format("bkframe").option("metadata", URI).option("log", NAME).load()``"""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    @message_first
    def reader(self, schema: StructType) -> DataSourceReader:
        arrow = check_schema(schema)
        opts = Options.parse(self.options)
        if not opts.logs and opts.log_pattern is None and not opts.ledgers:
            raise OptionError(
                "format 'bkframe' reads option 'log' (a log name, or several: 'a,b'), option 'logPattern' (a regular "
                "expression over log names) or option 'ledgers' (ledger ids)"
            )
        # Spark refuses a reader that can take filters while its filter pushdown is off
        # (spark.sql.python.filterPushdown.enabled, off by default), and asks for filters
        # only in its pushdown worker: offer pushdown there only.
        return PushdownReader(opts, arrow) if _in_pushdown_worker() else BatchReader(opts, arrow)

    @message_first
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise OptionError(
                "format 'bkframe' does not overwrite: a log is append-only; use .mode('append') "
                "(or delete the log with 'bkframe log delete NAME' and create it again)"
            )
        opts = Options.parse(self.options)
        columns = WriteColumns.of(schema)
        if routes_rows(opts, schema, columns):
            return RoutingWriter(opts, check_routing(opts), columns)
        return BulkWriter(opts, check_write(opts), columns)

    @message_first
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        arrow = check_schema(schema)
        opts = Options.parse(self.options)
        if opts.ending is not None or opts.ending_ts is not None:
            raise OptionError(
                "options 'endingPosition' and 'endingTimestamp' are for batch reads; a stream goes on as the log "
                "grows (to stop at the end found when it starts, use .trigger(availableNow=True))"
            )
        return LogStreamReader(opts, arrow)

    @message_first
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if overwrite:
            raise OptionError(
                "the bkframe sink appends to a log; outputMode('complete') would rewrite it every batch: "
                "use outputMode('append') or outputMode('update')"
            )
        opts = Options.parse(self.options)
        columns = WriteColumns.of(schema)
        if routes_rows(opts, schema, columns):
            return RoutingStreamWriter(opts, check_routing(opts), columns)
        return LogStreamWriter(opts, check_write(opts), columns)


def _in_pushdown_worker() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith("data_source_pushdown_filters.py"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class BatchReader(DataSourceReader):
    """A consistent snapshot: partitions are planned from what is confirmed now."""

    def __init__(self, opts: Options, schema: pa.Schema = ARROW_SCHEMA) -> None:
        self.opts = opts
        #: The columns each batch has (see reading.check_schema).
        self.schema = schema
        #: Pushed-down filters, as (column, operator, value).
        self.constraints: list[Constraint] = []

    @message_first
    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        bk = client_for(opts)
        if opts.ledgers:
            parts = call(bk, "planning the read of ledgers", opts.timeout_s, plan_ledgers, bk.client, opts)
        else:
            parts = call(bk, f"planning the read of {describe(opts)}", opts.timeout_s, plan_logs, bk.client, opts)
        return split(narrow(parts, self.constraints), opts.entries_per_partition, opts.bytes_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, EntryRange):
            return iter(())  # Spark's stand-in partition for an empty plan
        task_starts()
        return read_partition(self.opts, partition, self.schema)


_OPS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<=", In: "in"}
_COLUMNS = ("ledger_id", "segment", "entry_id", "offset", "timestamp")
#: Filters that only prune (Spark still checks each row): event times may come in any order
#: within a segment, an IN list is narrowed to its [min, max], an entry beyond 2**32 has no offset.
_ALSO_BY_SPARK = ("timestamp", "offset")
#: A pushed-down filter: (column, operator, the values it names -- one, or the list of an
#: IN); timestamps in microseconds since the epoch.
Constraint = tuple[str, str, tuple[int, ...]]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(value: object) -> int | None:
    """A timestamp filter's value (Spark passes a datetime, in UTC) in microseconds."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // datetime.resolution


def _int_values(f: Filter, op: str, column: str) -> tuple[int, ...] | None:
    raw = getattr(f, "value", None)
    values = tuple(raw) if op == "in" and isinstance(raw, (list, tuple)) else (raw,)
    if column == "timestamp":
        micros = tuple(_micros(v) for v in values)
        return micros if values and all(m is not None for m in micros) else None  # type: ignore[return-value]
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return values  # type: ignore[return-value]
    return None


class PushdownReader(BatchReader):
    """:class:`BatchReader` that prunes partitions and entry ranges by filters on
    ``ledger_id``, ``segment``, ``entry_id`` and ``offset``, and skips segments whose
    recorded time range cannot match filters on ``timestamp`` (Spark >= 4.1 with pushdown on)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            op = _OPS.get(type(f))
            attribute = tuple(getattr(f, "attribute", ()))
            column = str(attribute[0]).lower() if len(attribute) == 1 else ""
            values = _int_values(f, op, column) if op is not None and column in _COLUMNS else None
            if op is None or values is None:
                yield f  # Spark evaluates it
                continue
            self.constraints.append((column, op, values))
            if (op == "in" and column == "entry_id") or column in _ALSO_BY_SPARK:
                yield f  # pruned by it only: Spark still checks each row


def _holds(op: str, have: int, values: tuple[int, ...]) -> bool:
    if op == "in":
        return have in values
    value = values[0]
    return {"=": have == value, ">": have > value, ">=": have >= value, "<": have < value, "<=": have <= value}[op]


def _may_be_in_time(part: EntryRange, op: str, values: tuple[int, ...]) -> bool:
    """Some record of ``part`` may satisfy the timestamp filter (microseconds)."""
    if not part.enveloped:
        return False  # raw entries (and ledgers read directly) have a null timestamp: no comparison holds
    if part.max_ts < 0:
        return True  # not recorded (an open or recovered segment): read it
    low = part.min_ts * 1000 if part.min_ts >= 0 else -(1 << 63)
    high = part.max_ts * 1000
    if op in ("=", "in"):
        return any(low <= v <= high for v in values)
    value = values[0]
    return {">": high > value, ">=": high >= value, "<": low < value, "<=": low <= value}[op]


def _offsets(part: EntryRange, op: str, values: tuple[int, ...], lo: int, hi: int) -> tuple[int, int]:
    """``lo..hi`` narrowed by a filter on ``offset`` (``segment << 32 | entry_id``); an
    empty range (lo > hi) if no entry of the part can match."""
    if part.segment is None:
        return 1, 0  # no offset (ledgers read directly)
    mask = (1 << OFFSET_BITS) - 1
    if op in ("=", "in"):
        here = [v & mask for v in values if v >> OFFSET_BITS == part.segment]
        return (max(lo, min(here)), min(hi, max(here))) if here else (1, 0)
    value = values[0]
    segment, entry = value >> OFFSET_BITS, value & mask
    if op in (">", ">="):
        if segment > part.segment:
            return 1, 0
        return (max(lo, entry + (op == ">")), hi) if segment == part.segment else (lo, hi)
    if segment < part.segment:
        return 1, 0
    return (lo, min(hi, entry - (op == "<"))) if segment == part.segment else (lo, hi)


def narrow(parts: Sequence[EntryRange], constraints: Sequence[Constraint]) -> list[EntryRange]:
    """The ranges (or parts of them) whose rows can satisfy every constraint."""
    out = []
    for part in parts:
        lo, hi, keep = part.first, part.last, True
        for column, op, values in constraints:
            if column == "entry_id":
                if op in ("in", "="):
                    lo, hi = max(lo, min(values)), min(hi, max(values))
                elif op in (">", ">="):
                    lo = max(lo, values[0] + (op == ">"))
                else:
                    hi = min(hi, values[0] - (op == "<"))
            elif column == "offset":
                lo, hi = _offsets(part, op, values, lo, hi)
            elif column == "timestamp":
                keep = keep and _may_be_in_time(part, op, values)
            else:
                have = part.segment if column == "segment" else part.ledger_id
                keep = keep and have is not None and _holds(op, have, values)
        if keep and lo <= hi:
            out.append(replace(part, first=lo, last=hi))
    return out


class BulkWriter(DataSourceArrowWriter):
    """``df.write.format("bkframe").option("log", NAME).mode("append").save()``"""

    def __init__(self, opts: Options, spec: LedgerSpec, columns: WriteColumns) -> None:
        self.opts = opts
        self.spec = spec
        self.columns = columns
        #: The write's id: the tag of its ledgers and (as the token) of its commit.
        self.write_id = uuid.uuid4().hex
        self.token = f"spark:write:{self.write_id}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerMessage:  # type: ignore[override]
        task_starts()
        return write_task(self.opts, self.spec, self.write_id, self.token, self.columns, iterator)

    @message_first
    def commit(self, messages: list[LedgerMessage | None]) -> None:  # type: ignore[override]
        commit_write(self.opts, self.spec, self.token, messages)

    @message_first
    def abort(self, messages: list[LedgerMessage | None]) -> None:  # type: ignore[override]
        abort_write(self.opts, self.spec, self.token, self.write_id)
