"""The data source's options: parsed once, checked, with errors that say what to write.

Spark hands a Python data source its options as a case-insensitive map of strings; every
option the connector knows is listed in :data:`KNOWN`, and an unknown one is an error (a
misspelt ``maxEntriesPerTriger`` silently ignored would read a whole log in one batch).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import attrs

from bkframe import EARLIEST, LATEST, Position, check_name, parse_where
from bkframe.errors import BKError

#: Every option and what it is for (Spark hands them over lower-cased: see :data:`NAMES`).
KNOWN = {
    "metadata": "metadata store URI (default: $BKFRAME_METADATA)",
    "log": "the named log to read or write; reads: several, comma-separated",
    "logPattern": "reads: every log whose whole name matches this regular expression (streams pick up new ones)",
    "ledgers": "batch read of ledgers instead of a log: comma-separated ids",
    "password": "the log's (or the ledgers') password: one for every log a query reads or writes",
    "startingPosition": "earliest, latest or SEGMENT:ENTRY",
    "endingPosition": "latest or SEGMENT:ENTRY (exclusive; batch reads)",
    "startingTimestamp": "start at the first record at or after this time (ms since the epoch)",
    "endingTimestamp": "end before the first record at or after this time (ms since the epoch; batch reads)",
    "entriesPerPartition": "at most this many entries per read partition",
    "bytesPerPartition": "at most about this many payload bytes per read partition",
    "ledgerType": "the type of the ledgers a write makes (default VD_JOURNAL)",
    "maxEntriesPerTrigger": "at most this many entries per micro-batch",
    "maxBytesPerTrigger": "at most about this many bytes of records per micro-batch",
    "minEntriesPerTrigger": "a micro-batch waits for at least this many new entries (or maxTriggerDelay)",
    "maxTriggerDelay": "with minEntriesPerTrigger: the longest a micro-batch waits (default 15m)",
    "cursor": "a durable cursor the stream advances as Spark commits batches",
    "failOnDataLoss": "fail (true) or skip ahead (false) when positions were trimmed",
    "createLog": "writing: create the log (default settings) if it does not exist (default true)",
    "offloaded": "reads: offloaded segments from their tier objects ('tier', the default) or their ledgers ('bookies')",
    "timeoutSeconds": "timeout of each call a task or the driver makes to bkframe",
    "tlsCa": "TLS: PEM file of the CA that signs the bookies' certificates (every machine needs it)",
    "tlsCert": "TLS: PEM file of the client's certificate, for bookies that require one (with tlsKey)",
    "tlsKey": "TLS: PEM file of the client certificate's key (with tlsCert)",
    "authToken": "the token for bookies with token authentication (prefer authTokenFile)",
    "authTokenFile": "a file whose first line is the token (every machine needs it)",
    "checkpointLocation": "(Spark's own; accepted and ignored)",
    "path": "(Spark's own; accepted and ignored)",
}
#: An option's name as written in the docs, by its lower-cased key: what errors call it.
NAMES = {name.lower(): name for name in KNOWN}
DEFAULT_ENTRIES_PER_PARTITION = 50_000
DEFAULT_BYTES_PER_PARTITION = 128 << 20
DEFAULT_TIMEOUT_S = 120.0
#: Kafka's ``maxTriggerDelay`` default.
DEFAULT_MAX_TRIGGER_DELAY_S = 15 * 60.0
#: Units of a duration, as Spark's and Kafka's options take them (a bare number is milliseconds).
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


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
        raise OptionError(f"option {NAMES[key]!r} must be a whole number >= {minimum}, got {raw!r}")
    return value


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    word = str(raw).strip().lower()
    if word not in ("true", "false"):
        raise OptionError(f"option {NAMES[key]!r} must be true or false, got {raw!r}")
    return word == "true"


def _duration_s(options: Mapping[str, str], key: str, default: float) -> float:
    raw = options.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    unit = text[len(number) :].strip() or "ms"
    try:
        value = float(number) * _DURATION_UNITS[unit]
    except (KeyError, ValueError):
        value = -1.0
    if not value > 0:
        raise OptionError(f"option {NAMES[key]!r} must be a duration > 0 such as 30s, 15m, 1h or 500ms, got {raw!r}")
    return value


def _file(options: Mapping[str, str], key: str) -> str:
    """A file path option, checked readable here (on the driver, which connects too)."""
    raw = options.get(key)
    if raw is None:
        return ""
    path = str(raw).strip()
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise OptionError(f"option {NAMES[key]!r}: cannot read file {path!r} (it must exist on the driver and every executor)")
    return path


def read_token_file(path: str) -> str:
    """The token in ``path``: its first line, stripped (the CLI's ``--auth-token-file`` reads it so)."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise OptionError(f"option 'authTokenFile': cannot read {path!r}: {e}") from None
    if not token:
        raise OptionError(f"option 'authTokenFile': {path!r} is empty; its first line must be the token")
    return token


def _log_names(raw: str) -> tuple[str, ...]:
    """Option ``log``: one name, or several separated by commas (each once, in order)."""
    names: list[str] = []
    for part in str(raw).split(","):
        name = part.strip()
        try:
            check_name(name)
        except ValueError as e:
            raise OptionError(f"option 'log': {e} (several logs are separated by commas: 'a,b')") from None
        if name not in names:
            names.append(name)
    return tuple(names)


def _pattern(raw: str) -> str:
    try:
        re.compile(raw)
    except re.error as e:
        raise OptionError(f"option 'logPattern': {raw!r} is not a regular expression ({e}); e.g. 'orders-.*'") from None
    return raw


def _where(options: Mapping[str, str], key: str) -> Position | str | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        return parse_where(str(raw))
    except ValueError as e:
        raise OptionError(f"option {NAMES[key]!r}: {e}") from None


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
    #: ``startingTimestamp`` / ``endingTimestamp`` (ms since the epoch).
    starting_ts: int | None = None
    ending_ts: int | None = None
    max_bytes_per_trigger: int | None = None
    min_entries_per_trigger: int | None = None
    max_trigger_delay_s: float = DEFAULT_MAX_TRIGGER_DELAY_S
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    #: A secret: never in a repr, a log line or an error.
    auth_token: str = attrs.field(default="", repr=False)
    #: Read where a client is opened (driver and executors): the token never travels in a plan.
    auth_token_file: str = ""
    #: Every log of option ``log`` (``log`` above is the one when there is exactly one).
    logs: tuple[str, ...] = ()
    #: Option ``logPattern``: a regular expression a whole log name must match.
    log_pattern: str | None = None
    #: Option ``offloaded``: where offloaded segments are read, ``tier`` or ``bookies``.
    offloaded: str = "tier"

    @property
    def several_logs(self) -> bool:
        """The query reads a set of logs (a list or a pattern), each row's ``log`` saying which."""
        return self.log_pattern is not None or len(self.logs) > 1

    def matches(self, names: list[str]) -> list[str]:
        """The logs of ``names`` the query reads (sorted): the listed ones, or those the pattern matches."""
        if self.log_pattern is None:
            return sorted(set(self.logs) & set(names))
        pattern = re.compile(self.log_pattern)
        return sorted(name for name in names if pattern.fullmatch(name))

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        """The options Spark hands over, checked one group at a time (the first error found is raised)."""
        opts = _known(options)
        metadata = _metadata(opts)
        logs, log_pattern, ledgers = _source(opts)
        starting, ending = _positions(opts, several_logs=len(logs) > 1 or log_pattern is not None, ledgers=ledgers)
        cursor = _cursor(opts)
        starting_ts, ending_ts = _timestamps(opts, starting, ending, ledgers=ledgers)
        max_entries, min_entries = _entries_per_trigger(opts)
        tls_ca, tls_cert, tls_key, auth_token, auth_token_file = _security(opts)
        offloaded = _offloaded(opts)
        timeout_s = _timeout_s(opts)
        return cls(
            metadata=metadata,
            log=logs[0] if len(logs) == 1 else None,
            ledgers=ledgers,
            password=str(opts.get("password", "")).encode(),
            starting=starting,
            ending=ending,
            entries_per_partition=_int(opts, "entriesperpartition", DEFAULT_ENTRIES_PER_PARTITION) or 1,
            bytes_per_partition=_int(opts, "bytesperpartition", DEFAULT_BYTES_PER_PARTITION) or 1,
            ledger_type=str(opts.get("ledgertype", "VD_JOURNAL")).upper(),
            max_entries_per_trigger=max_entries,
            cursor=cursor,
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            timeout_s=timeout_s,
            create_log=_bool(opts, "createlog", True),
            starting_ts=starting_ts,
            ending_ts=ending_ts,
            max_bytes_per_trigger=_int(opts, "maxbytespertrigger", None),
            min_entries_per_trigger=min_entries,
            max_trigger_delay_s=_duration_s(opts, "maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY_S),
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            auth_token=auth_token,
            auth_token_file=auth_token_file,
            logs=logs,
            log_pattern=log_pattern,
            offloaded=offloaded,
        )

    def security(self) -> dict[str, str]:
        """``bkframe.connect`` keywords for TLS and the token (the token file read now; empty: not used)."""
        token = read_token_file(self.auth_token_file) if self.auth_token_file else self.auth_token
        return {"tls_ca": self.tls_ca, "tls_cert": self.tls_cert, "tls_key": self.tls_key, "auth_token": token}

    def need_log(self, what: str) -> str:
        if self.log_pattern is not None:
            raise OptionError(f"{what} takes option 'log' (one log's name), not 'logPattern' (for reads)")
        if len(self.logs) > 1:
            raise OptionError(
                f"{what} takes one log, and option 'log' names {len(self.logs)} ({', '.join(self.logs)}); to write "
                "several logs, drop option 'log' and give each row its log in a 'log' column"
            )
        if self.log is None:
            raise OptionError(
                f"{what} needs option 'log' (the name of a bkframe log), or a string column 'log' naming each row's log"
            )
        return self.log


# -- the steps of Options.parse, one per group of options, in the order it checks them --------


def _known(options: Mapping[str, str]) -> dict[str, str]:
    """The options by lower-cased name (as Spark hands them over); an unknown one is an error."""
    opts = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(set(opts) - set(NAMES))
    if unknown:
        raise OptionError(
            f"unknown option(s) {unknown} for format 'bkframe'; the options are: "
            + ", ".join(k for k in KNOWN if k not in ("path", "checkpointLocation"))
        )
    return opts


def _metadata(opts: Mapping[str, str]) -> str:
    """Option ``metadata``, else ``$BKFRAME_METADATA``: one of them is needed."""
    metadata = opts.get("metadata") or os.environ.get("BKFRAME_METADATA", "")
    if not metadata:
        raise OptionError(
            "format 'bkframe' needs option 'metadata' (the metadata store URI, e.g. sqlite:///path/metadata.db) "
            "or $BKFRAME_METADATA"
        )
    return str(metadata)


def _source(opts: Mapping[str, str]) -> tuple[tuple[str, ...], str | None, tuple[int, ...]]:
    """What is read or written: options ``log``, ``logPattern`` or ``ledgers``, one of them at most."""
    logs = _log_names(opts["log"]) if opts.get("log") is not None else ()
    log_pattern = _pattern(str(opts["logpattern"])) if opts.get("logpattern") is not None else None
    ledgers: tuple[int, ...] = ()
    if opts.get("ledgers") is not None:
        try:
            ledgers = tuple(int(x) for x in str(opts["ledgers"]).split(",") if x.strip())
        except ValueError:
            ledgers = ()
        if not ledgers or any(i < 0 for i in ledgers):
            raise OptionError(f"option 'ledgers' must list ledger ids, e.g. '1,2,7', got {opts['ledgers']!r}")
    given = [name for name, value in (("log", logs), ("logPattern", log_pattern), ("ledgers", ledgers)) if value]
    if len(given) > 1:
        raise OptionError(f"give one of options 'log', 'logPattern' and 'ledgers', not {' and '.join(map(repr, given))}")
    return logs, log_pattern, ledgers


def _positions(
    opts: Mapping[str, str], *, several_logs: bool, ledgers: tuple[int, ...]
) -> tuple[Position | str | None, Position | str | None]:
    """Options ``startingPosition`` and ``endingPosition``: places in one log, or earliest / latest."""
    starting = _where(opts, "startingposition")
    ending = _where(opts, "endingposition")
    if ending == EARLIEST:
        raise OptionError("option 'endingPosition' must be 'latest' or SEGMENT:ENTRY, not 'earliest'")
    if several_logs and (isinstance(starting, Position) or isinstance(ending, Position)):
        raise OptionError(
            "a position SEGMENT:ENTRY names a place in one log; with several logs ('log' with commas, or "
            "'logPattern') options 'startingPosition' and 'endingPosition' take 'earliest' / 'latest' (or use "
            "'startingTimestamp' / 'endingTimestamp', which apply to each log)"
        )
    if ledgers and (starting is not None or ending is not None):
        raise OptionError("options 'startingPosition' and 'endingPosition' are for logs, not with 'ledgers'")
    return starting, ending


def _cursor(opts: Mapping[str, str]) -> str | None:
    """Option ``cursor``: a durable cursor's name."""
    cursor = opts.get("cursor")
    if cursor is not None:
        try:
            check_name(cursor, "cursor")
        except ValueError as e:
            raise OptionError(f"option 'cursor': {e}") from None
    return cursor


def _timestamps(
    opts: Mapping[str, str], starting: Position | str | None, ending: Position | str | None, *, ledgers: tuple[int, ...]
) -> tuple[int | None, int | None]:
    """Options ``startingTimestamp`` and ``endingTimestamp``: instead of the positions, for logs only."""
    starting_ts = _int(opts, "startingtimestamp", None, minimum=0)
    ending_ts = _int(opts, "endingtimestamp", None, minimum=0)
    if starting_ts is not None and starting is not None:
        raise OptionError("give option 'startingPosition' or option 'startingTimestamp', not both")
    if ending_ts is not None and ending is not None:
        raise OptionError("give option 'endingPosition' or option 'endingTimestamp', not both")
    if ledgers and (starting_ts is not None or ending_ts is not None):
        raise OptionError(
            "options 'startingTimestamp' and 'endingTimestamp' are for logs, not with 'ledgers' (ledgers have no "
            "time index; filter on the 'timestamp' column instead)"
        )
    if starting_ts is not None and ending_ts is not None and ending_ts < starting_ts:
        raise OptionError(f"option 'endingTimestamp' ({ending_ts}) is before 'startingTimestamp' ({starting_ts})")
    return starting_ts, ending_ts


def _entries_per_trigger(opts: Mapping[str, str]) -> tuple[int | None, int | None]:
    """Options ``maxEntriesPerTrigger`` and ``minEntriesPerTrigger`` (which ``maxTriggerDelay`` needs)."""
    max_entries = _int(opts, "maxentriespertrigger", None)
    min_entries = _int(opts, "minentriespertrigger", None)
    if min_entries is not None and max_entries is not None and min_entries > max_entries:
        raise OptionError(
            f"option 'minEntriesPerTrigger' ({min_entries}) is more than 'maxEntriesPerTrigger' ({max_entries}): "
            "no micro-batch could satisfy both"
        )
    if "maxtriggerdelay" in opts and min_entries is None:
        raise OptionError("option 'maxTriggerDelay' bounds how long 'minEntriesPerTrigger' waits: give that too")
    return max_entries, min_entries


def _security(opts: Mapping[str, str]) -> tuple[str, str, str, str, str]:
    """TLS files and the token: ``(tlsCa, tlsCert, tlsKey, authToken, authTokenFile)``, each file
    readable here and the token file not empty."""
    tls_ca, tls_cert, tls_key = _file(opts, "tlsca"), _file(opts, "tlscert"), _file(opts, "tlskey")
    if bool(tls_cert) != bool(tls_key):
        raise OptionError("options 'tlsCert' and 'tlsKey' go together: give both (certificate and key) or neither")
    if tls_cert and not tls_ca:
        raise OptionError("option 'tlsCert' needs option 'tlsCa' (the CA that signs the bookies' certificates)")
    auth_token = str(opts.get("authtoken", "")).strip()
    auth_token_file = _file(opts, "authtokenfile")
    if "authtoken" in opts and not auth_token:
        raise OptionError("option 'authToken' is empty")
    if auth_token and auth_token_file:
        raise OptionError("give option 'authToken' or option 'authTokenFile', not both")
    if auth_token_file:
        read_token_file(auth_token_file)  # an empty or unreadable file fails here, on the driver
    return tls_ca, tls_cert, tls_key, auth_token, auth_token_file


def _offloaded(opts: Mapping[str, str]) -> str:
    """Option ``offloaded``: ``tier`` or ``bookies``."""
    offloaded = str(opts.get("offloaded", "tier")).strip().lower()
    if offloaded not in ("tier", "bookies"):
        raise OptionError(
            f"option 'offloaded' is 'tier' (read offloaded segments from their objects, the default) or 'bookies' "
            f"(from their ledgers, while the bookies still hold them), not {opts['offloaded']!r}"
        )
    return offloaded


def _timeout_s(opts: Mapping[str, str]) -> float:
    """Option ``timeoutSeconds``: a number of seconds > 0."""
    raw_timeout = opts.get("timeoutseconds")
    try:
        timeout_s = float(raw_timeout) if raw_timeout is not None else DEFAULT_TIMEOUT_S
    except ValueError:
        timeout_s = -1.0
    if not timeout_s > 0:
        raise OptionError(f"option 'timeoutSeconds' must be a number of seconds > 0, got {raw_timeout!r}")
    return timeout_s


__all__ = ["EARLIEST", "KNOWN", "LATEST", "NAMES", "OptionError", "Options"]
