"""Tiered storage, all of it: a log's closed segments as Parquet objects in a tier
(docs/tiered-storage.md).

The modules, by what they do:

* the object format and its files: :mod:`.object_format` (schema, options), :mod:`.keys`
  (object keys), :mod:`.footer` (row groups, spans), :mod:`.segment_writer` (a ledger's
  entries to an object), :mod:`.verify` (an object checked against its ledger),
  :mod:`.segment_reader` (objects read by range or time), :mod:`.snapshot` (a log as a
  dataset), :mod:`.ranged_file`;
* a tier from the client's event loop: :mod:`.async_tier`, :mod:`.open_tiers` (one per URI);
* a log's segments in the tier: :mod:`.offload` (a closed segment to an object, committed
  in the log record), :mod:`.offload_record` (what a segment records of its object),
  :mod:`.segment_cas` (one segment changed wherever its record is), :mod:`.reads` (reading
  it back), :mod:`.deletes` (a trim's or delete's objects), :mod:`.sweep` (orphans, tier
  check), :mod:`.offload_policy` (what is due), :mod:`.offload_deletion` (ledgers after the
  lag);
* the offload service (``bkframe offloader``, or inside autorecovery):
  :mod:`.offload_service`, :mod:`.backoff` (a failing tier), :mod:`.offload_metrics`.

This package's own names are the public face for code that reads segment objects itself
(query engines' connectors: row groups as partitions, ranged reads, or an engine's own
Parquet reader on a ``file://`` tier's files). They need pyarrow (``bkframe[arrow]``) and are
imported on first use, so that the client's modules here (reads, deletes, the offload
service) never import pyarrow for a log that has no tier.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # For type checkers and IDEs: the names as their modules define them.
    from bkframe.tiering.footer import ObjectFooter as ObjectFooter
    from bkframe.tiering.footer import RowGroupSpan as RowGroupSpan
    from bkframe.tiering.object_format import CorruptObjectError as CorruptObjectError
    from bkframe.tiering.object_format import ObjectOptions as ObjectOptions
    from bkframe.tiering.object_format import object_schema as object_schema
    from bkframe.tiering.segment_reader import AsyncSegmentObjectReader as AsyncSegmentObjectReader
    from bkframe.tiering.segment_reader import SegmentObjectReader as SegmentObjectReader
    from bkframe.tiering.snapshot import log_dataset as log_dataset
    from bkframe.tiering.snapshot import object_path as object_path
    from bkframe.tiering.snapshot import whole_local_object as whole_local_object

#: Each public name, and the module of this package that defines it.
_PUBLIC = {
    "AsyncSegmentObjectReader": "segment_reader",
    "CorruptObjectError": "object_format",
    "ObjectFooter": "footer",
    "ObjectOptions": "object_format",
    "RowGroupSpan": "footer",
    "SegmentObjectReader": "segment_reader",
    "log_dataset": "snapshot",
    "object_path": "snapshot",
    "object_schema": "object_format",
    "whole_local_object": "snapshot",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'bkframe.tiering' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bkframe.tiering.{module}"), name)
