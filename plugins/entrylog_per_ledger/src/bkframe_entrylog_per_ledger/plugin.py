"""The ``per_ledger`` entry-log manager: answers ``[entry_log_manager] plugin = "per_ledger"``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bkframe.core.config import ConfigError
from bkframe.core.counters import Counters
from bkframe.core.hookspecs import hookimpl
from bkframe_entrylog_per_ledger.manager import (
    DEFAULT_EXPIRE_AFTER_ACCESS_S,
    DEFAULT_MAX_ACTIVE,
    DEFAULT_MAX_LOG_SIZE,
    LOG_HEADER,
    PerLedgerEntryLogManager,
)

NAME = "per_ledger"

#: Config keys: (default, what it is, smallest value allowed).
KEYS: dict[str, tuple[float, str, float]] = {
    "max_active": (DEFAULT_MAX_ACTIVE, "ledgers with an open (active) log at most", 1),
    "expire_after_access_s": (DEFAULT_EXPIRE_AFTER_ACCESS_S, "seconds without an append before a log is sealed", 0.001),
    "max_log_size": (DEFAULT_MAX_LOG_SIZE, "bytes a log may grow to before a new one is started", LOG_HEADER.size + 1),
}


def parse_config(config: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(config) - set(KEYS) - {"plugin"})
    if unknown:
        known = "; ".join(f"{k} ({what}, default {default})" for k, (default, what, _) in KEYS.items())
        raise ConfigError(f"[entry_log_manager] unknown key(s) for plugin per_ledger: {', '.join(unknown)}; known: {known}")
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "plugin":
            continue
        default, what, smallest = KEYS[key]
        integral = isinstance(default, int)
        if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)) or value < smallest:
            kind = "an integer" if integral else "a number"
            raise ConfigError(f"[entry_log_manager] {key} = {value!r} should be {kind} >= {smallest} ({what})")
        out[key] = value
    return out


@hookimpl
def bkframe_entry_log_manager(
    name: str, config: dict[str, Any], directory: Path, counters: Counters
) -> PerLedgerEntryLogManager | None:
    if name != NAME:
        return None
    return PerLedgerEntryLogManager(directory, counters, **parse_config(config))
