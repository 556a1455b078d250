"""Ledger storage ``default``: entries interleaved in shared entry logs, one index per ledger.

See :mod:`.storage` for the add/read/checkpoint paths, :mod:`.entry_record` for an entry
in an entry log, :mod:`.ledger_index` for the index file format, :mod:`.ledger_table` for
the ledgers' states, :mod:`.index_cache` for the bounded set of open indexes,
:mod:`.startup` for what happens at open and :mod:`.compaction` for garbage collection. This module registers the
component with its config class (:mod:`.config`).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bkframe.core.counters import Counters
from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces.entry_log import EntryLogManager
from bkframe.core.registry import ComponentRegistry

from .config import DefaultStorageConfig

if TYPE_CHECKING:
    from .ledger_index import IndexCorruptError, LedgerIndex
    from .storage import DefaultLedgerStorage, StorageCorruptError

__all__ = [
    "DefaultLedgerStorage",
    "DefaultStorageConfig",
    "IndexCorruptError",
    "LedgerIndex",
    "StorageCorruptError",
    "bkframe_register_components",
    "make_storage",
]

PLUGIN_NAME = "default"

#: The storage's names, imported when first asked for (PEP 562): every process that loads the
#: plugin manager registers this component, and only a bookie's needs numpy and trio.
_DEFINED_IN = {
    "DefaultLedgerStorage": ".storage",
    "StorageCorruptError": ".storage",
    "IndexCorruptError": ".ledger_index",
    "LedgerIndex": ".ledger_index",
}


def __getattr__(name: str) -> Any:
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def make_storage(
    config: DefaultStorageConfig, directory: Path, entry_logs: EntryLogManager, counters: Counters
) -> DefaultLedgerStorage:
    from .storage import DefaultLedgerStorage

    return DefaultLedgerStorage(
        directory,
        entry_logs,
        counters,
        index_initial_entries=config.index_initial_entries,
        compaction_threshold=config.compaction_threshold,
        large_entry_bytes=config.large_entry_bytes,
        max_open_indexes=config.max_open_indexes,
        spare_index_files=config.spare_index_files,
    )


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_ledger_storage(
        PLUGIN_NAME,
        make_storage,
        config=DefaultStorageConfig,
        description="entries interleaved in shared entry logs, an mmap-backed index per ledger",
    )
