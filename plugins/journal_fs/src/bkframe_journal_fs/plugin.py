"""The ``journal_fs`` plugin: answers ``[journal] plugin = "journal_fs"``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bkframe.core.config import ConfigError
from bkframe.core.counters import Counters
from bkframe.core.hookspecs import hookimpl
from bkframe_journal_fs.fs_journal import FsJournal

NAME = "journal_fs"

#: Config keys with their defaults (see conf/bookie.toml for what each does).
DEFAULTS: dict[str, Any] = {
    "max_wait_ms": 1.0,
    "buffered_bytes_threshold": 512 * 1024,
    "flush_when_queue_empty": True,
    "preallocate_bytes": 16 * 1024 * 1024,
    "max_file_size": 256 * 1024 * 1024,
    "fsync": True,
}


def parse_config(config: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(config) - set(DEFAULTS) - {"plugin"})
    if unknown:
        raise ConfigError(
            f"[journal] unknown key(s) for plugin journal_fs: {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}"
        )
    out = dict(DEFAULTS)
    for key, value in config.items():
        if key == "plugin":
            continue
        default = DEFAULTS[key]
        ok = isinstance(value, bool) if isinstance(default, bool) else (
            isinstance(value, (int, float)) and not isinstance(value, bool)
            and (isinstance(default, float) or isinstance(value, int))
        )
        if not ok or (not isinstance(value, bool) and value < 0):
            kind = "true or false" if isinstance(default, bool) else "a non-negative number"
            raise ConfigError(f"[journal] {key} = {value!r} should be {kind}")
        out[key] = value
    if out["max_file_size"] < 4096:
        raise ConfigError(f"[journal] max_file_size = {out['max_file_size']} is too small (at least 4096)")
    return out


@hookimpl
def bkframe_journal(name: str, config: dict[str, Any], directory: Path, counters: Counters) -> FsJournal | None:
    if name != NAME:
        return None
    return FsJournal(directory, counters, **parse_config(config))
