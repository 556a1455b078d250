"""The data source's options: parsed once, checked, with errors that say what to write.

Spark hands a Python data source its options as a case-insensitive map of strings; every
option the connector knows is listed in :data:`KNOWN`, and an unknown one is an error (a
misspelt ``maxEntriesPerTriger`` silently ignored would read a whole log in one batch).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from bkframe import EARLIEST, LATEST, Position, check_name, parse_where
from bkframe.errors import BKError

#: Every option, lower-cased (Spark lower-cases the keys), and what it is for.
KNOWN = {
    "metadata": "metadata store URI (default: $BKFRAME_METADATA)",
    "log": "the named log to read or write",
    "ledgers": "batch read of ledgers instead of a log: comma-separated ids",
    "password": "the log's (or the ledgers') password",
    "startingposition": "earliest, latest or SEGMENT:ENTRY",
    "endingposition": "latest or SEGMENT:ENTRY (exclusive; batch reads)",
    "entriesperpartition": "at most this many entries per read partition",
    "bytesperpartition": "at most about this many payload bytes per read partition",
    "ledgertype": "the type of the ledgers a write makes (default VD_JOURNAL)",
    "maxentriespertrigger": "at most this many entries per micro-batch",
    "cursor": "a durable cursor the stream advances as Spark commits batches",
    "failondataloss": "fail (true) or skip ahead (false) when positions were trimmed",
    "createlog": "writing: create the log (default settings) if it does not exist (default true)",
    "timeoutseconds": "timeout of each call a task or the driver makes to bkframe",
    "checkpointlocation": "(Spark's own; accepted and ignored)",
    "path": "(Spark's own; accepted and ignored)",
}
DEFAULT_ENTRIES_PER_PARTITION = 50_000
DEFAULT_BYTES_PER_PARTITION = 128 << 20
DEFAULT_TIMEOUT_S = 120.0


class OptionError(BKError, ValueError):
    """A data source option is missing, unknown or malformed."""


def _int(options: Mapping[str, str], key: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise OptionError(f"option {key!r} must be a whole number >= {minimum}, got {raw!r}")
    return value


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    word = str(raw).strip().lower()
    if word not in ("true", "false"):
        raise OptionError(f"option {key!r} must be true or false, got {raw!r}")
    return word == "true"


def _where(options: Mapping[str, str], key: str) -> Position | str | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        return parse_where(str(raw))
    except ValueError as e:
        raise OptionError(f"option {key!r}: {e}") from None


@attrs.frozen
class Options:
    """What the user asked for, checked. Picklable: it travels to every task."""

    metadata: str
    log: str | None
    ledgers: tuple[int, ...]
    password: bytes
    starting: Position | str | None
    ending: Position | str | None
    entries_per_partition: int
    bytes_per_partition: int
    ledger_type: str
    max_entries_per_trigger: int | None
    cursor: str | None
    fail_on_data_loss: bool
    timeout_s: float
    create_log: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        opts = {str(k).lower(): v for k, v in options.items()}
        unknown = sorted(set(opts) - set(KNOWN))
        if unknown:
            raise OptionError(
                f"unknown option(s) {unknown} for format 'bkframe'; the options are: "
                + ", ".join(sorted(k for k in KNOWN if k not in ("path", "checkpointlocation")))
            )
        metadata = opts.get("metadata") or os.environ.get("BKFRAME_METADATA", "")
        if not metadata:
            raise OptionError(
                "format 'bkframe' needs option 'metadata' (the metadata store URI, e.g. sqlite:///path/metadata.db) "
                "or $BKFRAME_METADATA"
            )
        log = opts.get("log")
        if log is not None:
            try:
                check_name(log)
            except ValueError as e:
                raise OptionError(f"option 'log': {e}") from None
        ledgers: tuple[int, ...] = ()
        if opts.get("ledgers") is not None:
            try:
                ledgers = tuple(int(x) for x in str(opts["ledgers"]).split(",") if x.strip())
            except ValueError:
                ledgers = ()
            if not ledgers or any(i < 0 for i in ledgers):
                raise OptionError(f"option 'ledgers' must list ledger ids, e.g. '1,2,7', got {opts['ledgers']!r}")
        if log is not None and ledgers:
            raise OptionError("give option 'log' or option 'ledgers', not both")
        starting = _where(opts, "startingposition")
        ending = _where(opts, "endingposition")
        if ending == EARLIEST:
            raise OptionError("option 'endingPosition' must be 'latest' or SEGMENT:ENTRY, not 'earliest'")
        if ledgers and (starting is not None or ending is not None):
            raise OptionError("options 'startingPosition' and 'endingPosition' are for logs, not with 'ledgers'")
        cursor = opts.get("cursor")
        if cursor is not None:
            try:
                check_name(cursor, "cursor")
            except ValueError as e:
                raise OptionError(f"option 'cursor': {e}") from None
        raw_timeout = opts.get("timeoutseconds")
        try:
            timeout_s = float(raw_timeout) if raw_timeout is not None else DEFAULT_TIMEOUT_S
        except ValueError:
            timeout_s = -1.0
        if not timeout_s > 0:
            raise OptionError(f"option 'timeoutSeconds' must be a number of seconds > 0, got {raw_timeout!r}")
        return cls(
            metadata=str(metadata),
            log=log,
            ledgers=ledgers,
            password=str(opts.get("password", "")).encode(),
            starting=starting,
            ending=ending,
            entries_per_partition=_int(opts, "entriesperpartition", DEFAULT_ENTRIES_PER_PARTITION) or 1,
            bytes_per_partition=_int(opts, "bytesperpartition", DEFAULT_BYTES_PER_PARTITION) or 1,
            ledger_type=str(opts.get("ledgertype", "VD_JOURNAL")).upper(),
            max_entries_per_trigger=_int(opts, "maxentriespertrigger", None),
            cursor=cursor,
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            timeout_s=timeout_s,
            create_log=_bool(opts, "createlog", True),
        )

    def need_log(self, what: str) -> str:
        if self.log is None:
            raise OptionError(f"{what} needs option 'log' (the name of a bkframe log)")
        return self.log


__all__ = ["EARLIEST", "KNOWN", "LATEST", "OptionError", "Options"]
