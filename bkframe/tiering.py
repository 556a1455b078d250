"""Tiered storage for code that reads segment objects itself: query engines' connectors.

A log's offloaded segments are Parquet objects in a tier (docs/tiered-storage.md); a
connector that plans and reads them -- row groups as partitions, ranged reads, or an
engine's own Parquet reader on a ``file://`` tier's files -- uses these names, the public
face of :mod:`bkframe.client.tiering`. Importing this module imports pyarrow
(``bkframe[arrow]``); ``import bkframe`` does not.
"""

from bkframe.client.tiering.footer import ObjectFooter, RowGroupSpan
from bkframe.client.tiering.object_format import CorruptObjectError, ObjectOptions, object_schema
from bkframe.client.tiering.segment_reader import AsyncSegmentObjectReader, SegmentObjectReader
from bkframe.client.tiering.snapshot import log_dataset, object_path, whole_local_object

__all__ = [
    "AsyncSegmentObjectReader",
    "CorruptObjectError",
    "ObjectFooter",
    "ObjectOptions",
    "RowGroupSpan",
    "SegmentObjectReader",
    "log_dataset",
    "object_path",
    "object_schema",
    "whole_local_object",
]
