"""Ledger storage ``default``: entries interleaved in shared entry logs, one index per ledger.

See :mod:`.storage` for the add/read/checkpoint paths and :mod:`.ledger_index` for the
index file format. This module holds the plugin hook and config validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bkframe.core.config import ConfigError
from bkframe.core.counters import Counters
from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces import EntryLogManager

from .ledger_index import IndexCorruptError, LedgerIndex
from .storage import (
    DEFAULT_COMPACTION_THRESHOLD,
    DEFAULT_INDEX_INITIAL_ENTRIES,
    DefaultLedgerStorage,
    StorageCorruptError,
)

__all__ = [
    "DefaultLedgerStorage",
    "IndexCorruptError",
    "LedgerIndex",
    "StorageCorruptError",
    "bkframe_ledger_storage",
    "parse_config",
]

PLUGIN_NAME = "default"


def parse_config(config: dict[str, Any]) -> dict[str, Any]:
    """Validate the ``[ledger_storage]`` section; return constructor keyword arguments."""
    known = {"plugin", "index_initial_entries", "compaction_threshold"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(
            f"[ledger_storage] plugin 'default': unknown key(s) {', '.join(unknown)}; known keys: "
            f"index_initial_entries (entry slots a new index starts with, default {DEFAULT_INDEX_INITIAL_ENTRIES}), "
            f"compaction_threshold (compact sealed entry logs whose live fraction is below it, 0 to 1, "
            f"default {DEFAULT_COMPACTION_THRESHOLD}; 0 turns compaction off)"
        )
    kwargs: dict[str, Any] = {}
    if "compaction_threshold" in config:
        value = config["compaction_threshold"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ConfigError(
                f"[ledger_storage] compaction_threshold = {value!r} should be a number from 0 to 1 "
                f"(the live fraction under which a sealed entry log is compacted)"
            )
        kwargs["compaction_threshold"] = float(value)
    if "index_initial_entries" in config:
        value = config["index_initial_entries"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"[ledger_storage] index_initial_entries = {value!r} should be a positive integer")
        kwargs["index_initial_entries"] = value
    return kwargs


@hookimpl
def bkframe_ledger_storage(
    name: str,
    config: dict[str, Any],
    directory: Path,
    entry_logs: EntryLogManager,
    counters: Counters,
) -> DefaultLedgerStorage | None:
    if name != PLUGIN_NAME:
        return None
    return DefaultLedgerStorage(directory, entry_logs, counters, **parse_config(config))
