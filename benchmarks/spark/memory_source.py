"""Data sources for the benchmarks: one with no I/O, the ceiling of the Python data source's
hand-off to the JVM; and ``bkframe`` as it was before its tasks froze what a worker holds.

``spark.read.format("bkframe-memory").option("files", "a.parquet,b.parquet").load()`` has
bkframe's read columns (``.schema(...)`` may name some, as for ``bkframe``) and one partition
per row group of the files, as the ``bkframe`` data source plans an offloaded segment. Each
Python worker decodes every row group of the files once, into the very batches the
``bkframe`` source's tier path yields (``table.cast(schema).to_batches()``), and keeps them;
a task then only yields its row group's batches from memory. What a read costs beyond
Spark's own Parquet read of the same files is then the hand-off alone: Python writing Arrow
batches to the JVM, the JVM reading them and turning every row into a Spark row.

Like ``bkframe``, the first moves what a worker holds before its first read out of the reach of
Python's collector (``gc.freeze``; option ``freeze=false`` does not): pyspark's worker runs a
full collection after every task. Option ``rowsPerBatch`` re-slices the kept batches (zero-copy) to show what the batch size
of the hand-off does. The module must be importable by the Python workers: the benchmark
puts its directory on ``PYTHONPATH`` before Spark starts.

``spark.read.format("bkframe-before")`` is ``bkframe`` as it was before issue 50: every
object its task froze given back to Python's collector as the task starts reading
(``gc.unfreeze``), and an object's row groups handed to Spark as they decode, not cut to
``HANDOFF_BYTES``: to compare both in one run.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from bkframe_spark import tier_reading
from bkframe_spark.connection import task_starts
from bkframe_spark.reading import SCHEMA, check_schema
from bkframe_spark.source import BatchReader, BkframeDataSource, PushdownReader
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

#: Per Python worker: (files, schema) -> the batches of each row group, in plan order.
_kept: dict[tuple[tuple[str, ...], str], list[list[pa.RecordBatch]]] = {}


@dataclass(frozen=True)
class RowGroup(InputPartition):
    index: int


class MemorySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bkframe-memory"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MemoryReader(tuple(self.options["files"].split(",")), check_schema(schema),
                            int(self.options.get("rowsPerBatch", "0")), self.options.get("freeze", "true") == "true")


class MemoryReader(DataSourceReader):
    def __init__(self, files: tuple[str, ...], schema: pa.Schema, rows_per_batch: int, freeze: bool) -> None:
        self.files = files
        self.arrow = schema
        self.rows_per_batch = rows_per_batch
        self.freeze = freeze

    def partitions(self) -> Sequence[InputPartition]:
        count = sum(pq.ParquetFile(f).metadata.num_row_groups for f in self.files)
        return [RowGroup(i) for i in range(count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RowGroup)
        if self.freeze:
            task_starts()  # as bkframe's tasks do
        else:
            gc.unfreeze()
        key = (self.files, str(self.arrow))
        groups = _kept.get(key)
        if groups is None:  # every row group at once: a later task never decodes
            groups = _kept[key] = [
                pq.ParquetFile(f).read_row_group(i, columns=self.arrow.names).cast(self.arrow).to_batches()
                for f in self.files
                for i in range(pq.ParquetFile(f).metadata.num_row_groups)
            ]
        for batch in groups[partition.index]:
            step = self.rows_per_batch or batch.num_rows
            for start in range(0, batch.num_rows, step):
                yield batch.slice(start, step)


class BeforeSource(BkframeDataSource):
    @classmethod
    def name(cls) -> str:
        return "bkframe-before"

    def reader(self, schema: StructType) -> DataSourceReader:
        reader = super().reader(schema)
        reader.__class__ = BeforePushdownReader if isinstance(reader, PushdownReader) else BeforeReader
        return reader


class BeforeReader(BatchReader):
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _as_before(super().read(partition))


class BeforePushdownReader(BeforeReader, PushdownReader):
    pass


def _as_before(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    gc.unfreeze()  # what the task froze as it started
    cut = tier_reading.HANDOFF_BYTES
    tier_reading.HANDOFF_BYTES = 1 << 62  # a row group's batches as they decode
    try:
        yield from batches
    finally:
        tier_reading.HANDOFF_BYTES = cut
