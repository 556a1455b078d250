"""A snapshot of a log -- offloaded and hot segments -- as one ``pyarrow.dataset.Dataset``.

DuckDB (``duckdb.sql("select count(*) from ds")``), Polars (``polars.scan_pyarrow_dataset(ds)``)
and pyarrow itself scan a dataset lazily, pushing projections and filters into it. The
snapshot is the confirmed records from a start to an end fixed now (as
:meth:`~bkframe.client.logs.reader.LogReader.to_arrow`'s), in two kinds of parts:

- each offloaded segment wholly in the range whose object is a local file (a ``file://``
  tier) is a **Parquet fragment** of that file: the engine reads its row groups itself,
  skips those its filters rule out by their statistics (``offset``, ``entry_id``,
  ``timestamp``), and reads only the columns it needs;
- everything else -- hot segments, read from the bookies, an object in another tier (read by
  ranged gets), the part of a segment cut by the range's start or end -- is read now into an
  in-memory table.

The dataset's schema is the log reader's Arrow columns (:mod:`bkframe.client.logs.columns`);
the objects' extra ``flags`` column is left out, so every row is what ``LogReader`` reads,
each exactly once. The log's password was checked when the reader was opened; the files are
plain data, protected by the filesystem's permissions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.dataset as ds

from bkframe.client.logs import columns
from bkframe.client.logs.model import Position, SegmentRange


class SnapshotReader(Protocol):
    """What a snapshot needs of a :class:`~bkframe.client.logs.reader.LogReader`."""

    async def snapshot(self, start: Position, end: Position | None = None) -> list[SegmentRange]: ...

    def arrow_batches(self, start: Position, end: Position | None = None) -> AsyncIterator[pa.RecordBatch]: ...


def object_path(tier: str, key: str) -> Path | None:
    """The local file of the object ``key`` in ``tier``, if the tier is a directory
    (``file://``) and the file is there; else None."""
    parts = urlsplit(tier)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    path = Path(unquote(parts.path)).joinpath(*key.split("/"))
    return path if path.is_file() else None


def whole_local_object(part: SegmentRange) -> Path | None:
    """``part``'s object file when ``part`` is its whole segment and the object is local."""
    o = part.offload
    # The whole segment (an object with gaps holds fewer rows than the range's positions).
    if o is None or not (part.whole_segment or (part.first == 0 and part.entries == o.entries)):
        return None
    return object_path(o.tier, o.key)


async def log_dataset(reader: SnapshotReader, first: Position, stop: Position) -> ds.Dataset:
    """The confirmed records ``first`` up to ``stop`` (exclusive) as one dataset (see the module)."""
    schema = columns.schema()
    parts = await reader.snapshot(first, stop) if stop > first else []
    files: list[str] = []
    batches: list[pa.RecordBatch] = []
    for part in parts:
        path = whole_local_object(part)
        if path is not None:
            files.append(str(path))
            continue
        async for batch in reader.arrow_batches(Position(part.segment, part.first), Position(part.segment, part.last + 1)):
            batches.append(batch)
    hot = ds.dataset(pa.Table.from_batches(batches, schema=schema))
    if not files:
        return hot
    # Every page's checksum is checked as the engine reads it (the objects carry them).
    checked = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True))
    return ds.dataset([ds.dataset(files, schema=schema, format=checked), hot])
