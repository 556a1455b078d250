"""Bookie configuration: a TOML file, command-line overrides, validation with clear errors.

The ``[bookie]`` section belongs to the core and is validated here. The ``[journal]``,
``[ledger_storage]`` and ``[entry_log_manager]`` sections belong to whichever plugin
their ``plugin`` key names; the core passes them on as dicts and the plugin validates them.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from bkframe.errors import ConfigError

PLUGIN_SECTIONS = ("journal", "ledger_storage", "entry_log_manager")

DEFAULT_SECTIONS: dict[str, dict[str, Any]] = {
    "journal": {"plugin": "journal_fs"},
    "ledger_storage": {"plugin": "default"},
    "entry_log_manager": {"plugin": "single"},
}


@attrs.frozen
class BookieConfig:
    host: str = "127.0.0.1"
    port: int = attrs.field(default=3181, validator=attrs.validators.and_(attrs.validators.ge(0), attrs.validators.le(65535)))
    data_dir: Path = attrs.field(default=Path("data"), converter=Path)
    #: Metadata store URI; empty means the bookie does not register anywhere.
    metadata: str = ""
    #: Largest entry accepted, in bytes; a larger ADD gets BAD_REQUEST.
    max_entry_size: int = attrs.field(default=5 * 1024 * 1024, validator=attrs.validators.gt(0))
    #: Seconds live connections get to finish in-flight requests on shutdown.
    drain_timeout_s: float = attrs.field(default=5.0, validator=attrs.validators.ge(0))
    #: Seconds between checkpoints (flush ledger storage, persist LastLogMark, trim journal).
    checkpoint_interval_s: float = attrs.field(default=30.0, validator=attrs.validators.gt(0))
    #: Frames (request batches) a connection may have awaiting their responses.
    max_pending_batches: int = attrs.field(default=64, validator=attrs.validators.gt(0))
    #: The id the bookie registers with; defaults to HOST:PORT.
    bookie_id: str = ""
    #: On a cookie mismatch (data dir missing or replaced): re-stamp and start instead of refusing.
    auto_fix_cookies: bool = False
    #: BP-46: after an unclean shutdown or a replaced data dir, fence and put in limbo the
    #: ledgers that may have lost writes here, and repair them. Off only to demonstrate
    #: what it prevents (tests of BP-46 scenarios 1 and 2).
    data_loss_protection: bool = True
    #: Seconds between garbage collections (with a metadata store): ledgers deleted from
    #: the store are deleted here and entry logs no ledger uses any more are removed.
    gc_interval_s: float = attrs.field(default=60.0, validator=attrs.validators.gt(0))
    #: A dead bookie's registration disappears from the metadata store after about this long.
    registration_ttl_s: float = attrs.field(default=6.0, validator=attrs.validators.gt(0))
    #: A ledger this bookie deleted (garbage collection) is remembered this long, so that its
    #: old writer's adds are refused instead of creating it again (a week by default).
    deleted_ledger_retention_s: float = attrs.field(default=7 * 24 * 3600.0, validator=attrs.validators.gt(0))
    #: Read-only mode (BookKeeper's diskUsageThreshold): once this fraction of the data
    #: dir's filesystem is used, the bookie takes no more adds and registers read-only.
    disk_usage_threshold: float = attrs.field(
        default=0.95, validator=attrs.validators.and_(attrs.validators.gt(0), attrs.validators.le(1))
    )
    #: ...and takes adds again once usage is below this fraction (diskUsageLwm).
    disk_usage_lwm: float = attrs.field(default=0.90)
    #: Seconds between disk usage checks (diskCheckInterval).
    disk_check_interval_s: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))

    @disk_usage_lwm.validator
    def _lwm_below_threshold(self, attribute: attrs.Attribute[float], value: float) -> None:
        if not 0 < value <= self.disk_usage_threshold:
            raise ValueError(
                f"disk_usage_lwm = {value} must be above 0 and at most disk_usage_threshold = "
                f"{self.disk_usage_threshold} (the bookie leaves read-only mode below it)"
            )


@attrs.frozen
class Config:
    bookie: BookieConfig
    journal: Mapping[str, Any]
    ledger_storage: Mapping[str, Any]
    entry_log_manager: Mapping[str, Any]
    source: str = "(defaults)"


def _bookie_section(raw: Mapping[str, Any], source: str) -> BookieConfig:
    fields = {f.name: f for f in attrs.fields(BookieConfig)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) in [bookie]: {', '.join(unknown)}; known keys: {', '.join(sorted(fields))}"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        default = fields[key].default
        want = type(default) if not isinstance(default, Path) else (str, Path)
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if (isinstance(value, bool) and want is not bool) or not isinstance(value, want):
            raise ConfigError(f"{source}: [bookie] {key} = {value!r} should be {_type_name(want)}")
        values[key] = value
    try:
        return BookieConfig(**values)
    except ValueError as e:
        raise ConfigError(f"{source}: [bookie]: {e}") from None


def _type_name(t: Any) -> str:
    if isinstance(t, tuple):
        return "a path string"
    return {int: "an integer", float: "a number", str: "a string", bool: "a boolean"}.get(t, str(t))


def load_config(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read ``path`` (or use defaults), apply ``[bookie]`` overrides, validate."""
    raw: dict[str, Any] = {}
    source = "(defaults)"
    if path is not None:
        source = str(path)
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path} is not valid TOML: {e}") from None
    known = {"bookie", *PLUGIN_SECTIONS}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for section in known:
        if section in raw and not isinstance(raw[section], dict):
            raise ConfigError(f"{source}: [{section}] should be a table")
    bookie_raw = dict(raw.get("bookie", {}))
    for key, value in (overrides or {}).items():
        if value is not None:
            bookie_raw[key] = value
    sections = {s: {**DEFAULT_SECTIONS[s], **raw.get(s, {})} for s in PLUGIN_SECTIONS}
    return Config(bookie=_bookie_section(bookie_raw, source), source=source, **sections)
