"""Ledger storage ``default``: entries interleaved in shared entry logs, one index per ledger.

See :mod:`.storage` for the add/read/checkpoint paths, :mod:`.entry_record` for an entry
in an entry log, :mod:`.ledger_index` for the index file format, :mod:`.ledger_table` for
the ledgers' states, :mod:`.index_cache` for the bounded set of open indexes,
:mod:`.startup` for what happens at open and :mod:`.compaction` for garbage collection. This module registers the
component with its config class.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from bkframe.core.config import at_least, between
from bkframe.core.counters import Counters
from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces.entry_log import EntryLogManager
from bkframe.core.registry import ComponentRegistry

from .compaction import DEFAULT_COMPACTION_THRESHOLD
from .index_cache import MIN_OPEN_INDEXES
from .ledger_index import IndexCorruptError, LedgerIndex
from .spare_index_files import DEFAULT_SPARES
from .storage import DEFAULT_INDEX_INITIAL_ENTRIES, DEFAULT_MAX_OPEN_INDEXES, DefaultLedgerStorage, StorageCorruptError

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


@attrs.frozen
class DefaultStorageConfig:
    """``[ledger_storage]`` with ``plugin = "default"``."""

    #: Entry slots a new ledger's index file starts with (it doubles as needed).
    index_initial_entries: int = attrs.field(default=DEFAULT_INDEX_INITIAL_ENTRIES, validator=at_least(1))
    #: Compact sealed entry logs whose live fraction is below this (0 turns compaction off).
    compaction_threshold: float = attrs.field(default=DEFAULT_COMPACTION_THRESHOLD, validator=between(0, 1))
    #: PD_JOURNAL entries at least this long are written once: to the entry log, fsynced
    #: before the ack, with only their location in the journal (0 turns it off).
    large_entry_bytes: int = attrs.field(default=0, validator=at_least(0))
    #: Ledger indexes kept open at once, least recently used closed first (each open index
    #: takes two file descriptors; a bookie holds any number of ledgers within this).
    max_open_indexes: int = attrs.field(default=DEFAULT_MAX_OPEN_INDEXES, validator=at_least(MIN_OPEN_INDEXES))
    #: Index files a worker thread keeps made for new ledgers, so that a ledger's first add
    #: creates no file on the event loop (0: each is made as its first add comes).
    spare_index_files: int = attrs.field(default=DEFAULT_SPARES, validator=at_least(0))


def make_storage(
    config: DefaultStorageConfig, directory: Path, entry_logs: EntryLogManager, counters: Counters
) -> DefaultLedgerStorage:
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
