"""Bookie configuration: a TOML file, command-line overrides, validation with clear errors.

Every section is validated one way, by :func:`parse_section` against an attrs class whose
fields are its keys (typed, with defaults and validators): ``[bookie]`` and ``[plugins]``
belong to the core (:class:`BookieConfig`, :class:`PluginsConfig`); ``[journal]``,
``[ledger_storage]`` and ``[entry_log_manager]`` belong to the component their ``plugin``
key names, which registers its own config class with the component (see
:mod:`bkframe.core.registry`); the plugin manager validates them when it makes the part.
"""

from __future__ import annotations

import re
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import attrs

from bkframe.core.interfaces.auth import DEFAULT_PROVIDER as DEFAULT_AUTH_PROVIDER
from bkframe.core.interfaces.placement import DEFAULT_POLICY
from bkframe.errors import ConfigError

T = TypeVar("T")

PLUGIN_SECTIONS = ("journal", "ledger_storage", "entry_log_manager")

#: ``[bookie] max_entry_size`` and the client's ``max_entry_size`` by default: 5 MiB.
DEFAULT_MAX_ENTRY_SIZE = 5 * 1024 * 1024

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")


def _one_of(choices: tuple[str, ...]) -> Callable[[Any, attrs.Attribute[str], str], None]:
    def check(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in choices:
            raise ValueError(f"{attribute.name} = {value!r} should be one of {', '.join(choices)}")

    return check


@attrs.frozen
class LoggingConfig:
    """``[logging]``: ``level`` (debug, info, warning, error) and ``format`` (text, json)."""

    level: str = attrs.field(default="info", validator=_one_of(LEVELS))
    format: str = attrs.field(default="text", validator=_one_of(FORMATS))


@attrs.frozen
class TLSConfig:
    """``[tls]``: a bookie's certificate for its server and for its own client connections."""

    #: Serve TLS only: plaintext clients are refused with a clear error.
    enabled: bool = False
    #: PEM certificate chain of this bookie (the server certificate; also presented as the
    #: client certificate when this bookie connects to other bookies).
    cert: Path = attrs.field(default=Path(), converter=Path)
    #: PEM private key of ``cert``.
    key: Path = attrs.field(default=Path(), converter=Path)
    #: PEM CA bundle that signs clients' certificates (with ``require_client_cert``) and the
    #: other bookies' certificates (for this bookie's own client connections).
    ca: Path = attrs.field(default=Path(), converter=Path)
    #: Refuse clients that present no certificate signed by ``ca`` (mutual TLS; needed by
    #: the ``tls`` auth provider, which takes the principal from that certificate).
    require_client_cert: bool = False

    def check(self, where: str) -> None:
        """Clear errors for a section that cannot work, before the bookie starts."""
        if not self.enabled:
            return
        for name in ("cert", "key", "ca"):
            path: Path = getattr(self, name)
            if path == Path():
                raise ConfigError(f"{where}: enabled = true needs {name} (a PEM file)")
            if not path.is_file():
                raise ConfigError(f"{where}: {name} = {str(path)!r} is not a file")


DEFAULT_SECTIONS: dict[str, dict[str, Any]] = {
    "journal": {"plugin": "journal_fs"},
    "ledger_storage": {"plugin": "default"},
    "entry_log_manager": {"plugin": "single"},
}


# -- one way to validate a section ------------------------------------------------------------


def _kind(t: Any) -> str:
    """How a message names a field's type ("an integer", ...)."""
    name = t if isinstance(t, str) else getattr(t, "__name__", str(t))
    if typing.get_origin(t) is tuple or name.startswith("tuple"):
        return "a list of strings"
    return {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false", "Path": "a path"}.get(
        name, name
    )


def at_least(minimum: float) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A validator: ``KEY = VALUE should be an integer >= MINIMUM``."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value < minimum:
            raise ValueError(f"{attribute.name} = {value!r} should be {_kind(attribute.type)} >= {minimum}")

    return check


def above(low: float) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A validator: ``KEY = VALUE should be a number > LOW``."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not value > low:
            raise ValueError(f"{attribute.name} = {value!r} should be {_kind(attribute.type)} > {low}")

    return check


def at_most(high: float) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A validator: ``KEY = VALUE should be a number <= HIGH``."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value > high:
            raise ValueError(f"{attribute.name} = {value!r} should be {_kind(attribute.type)} <= {high}")

    return check


def between(low: float, high: float) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A validator: ``KEY = VALUE should be a number from LOW to HIGH``."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not low <= value <= high:
            raise ValueError(f"{attribute.name} = {value!r} should be {_kind(attribute.type)} from {low} to {high}")

    return check


def _accepts(t: Any, value: Any) -> tuple[bool, Any]:
    """Whether ``value`` (from TOML) fits type ``t``, and the value to use."""
    if typing.get_origin(t) is tuple:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return ok, tuple(value) if ok else value
    if t is bool:
        return isinstance(value, bool), value
    if isinstance(value, bool):
        return False, value
    if t is float:  # an integer is a number too (kept as written, so messages show it so)
        return isinstance(value, (int, float)), value
    if t is Path:
        return isinstance(value, (str, Path)), Path(value) if isinstance(value, (str, Path)) else value
    return isinstance(value, t), value


def parse_section(cls: type[T], raw: Mapping[str, Any], *, where: str) -> T:
    """Validate a config section against the attrs class ``cls``; return an instance.

    Unknown keys, values of the wrong type and values a field's validator refuses are
    :class:`ConfigError` errors that start with ``where`` (e.g. ``"conf/bookie.toml: [journal]
    (plugin 'journal_fs')"``) and name the key: ``unknown key(s) X; known keys: ...``,
    ``KEY = VALUE should be an integer``, ``KEY = VALUE should be a number >= 0``.
    Field types may be ``bool``, ``int``, ``float``, ``str``, ``Path`` or ``tuple[str, ...]``.
    """
    fields = {f.name: f for f in attrs.fields(attrs.resolve_types(cast(Any, cls)))}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(fields)) or '(none)'}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        ok, values[key] = _accepts(fields[key].type, value)
        if not ok:
            raise ConfigError(f"{where}: {key} = {value!r} should be {_kind(fields[key].type)}")
    try:
        return cls(**values)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None


# -- directories a component writes ------------------------------------------------------------

#: attrs field metadata of a component's config key that names directories it writes: True
#: (the bookie locks them, see :mod:`bkframe.storage_kit.directory_lock`) or False (it only reads them).
DIRECTORY = "bkframe_directory"

#: Key names that look like directories: a storage component's config class must declare
#: each with :func:`directory_field` (see :mod:`bkframe.core.registry`).
DIRECTORY_KEY_NAMES = re.compile(r"(^|_)(dir|dirs|directory|directories)$")


def directory_field(default: Any, *, locked: bool = True) -> Any:
    """A config key naming one directory (``str`` or ``Path``; "" is none) or several
    (``tuple[str, ...]``) that a journal, entry-log manager or ledger storage uses besides
    the directory the bookie hands it. A relative path is relative to that directory. The
    bookie locks each before it makes the component, for its whole life (one process per
    directory); ``locked=False`` for a directory the component only reads."""
    return attrs.field(default=default, metadata={DIRECTORY: locked})


def declared_directories(settings: Any, base: Path) -> list[Path]:
    """The directories a validated section's :func:`directory_field` keys name (the locked
    ones), relative paths taken from ``base``."""
    found: list[Path] = []
    for field in attrs.fields(type(settings)):
        if not field.metadata.get(DIRECTORY):
            continue
        value = getattr(settings, field.name)
        values = value if isinstance(value, tuple) else (value,)
        found += [base / v for v in values if v not in ("", None)]  # an absolute v stays itself
    return found


# -- addresses -------------------------------------------------------------------------------

#: Bind hosts that mean "every interface": never an address to give anyone.
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]", "*"})


def is_wildcard(host: str) -> bool:
    return host.strip() in WILDCARD_HOSTS


def split_address(value: str, where: str) -> tuple[str, int | None]:
    """``HOST`` or ``HOST:PORT`` (an IPv6 host in brackets) -> (host, port or None)."""
    text = value.strip()
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ConfigError(f"{where} = {value!r}: an IPv6 address goes in brackets, as [::1] or [::1]:3181")
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ConfigError(f"{where} = {value!r} should be HOST or HOST:PORT")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif text.count(":") > 1:
        raise ConfigError(f"{where} = {value!r}: write an IPv6 address in brackets, as [{text}]")
    if not host or any(c.isspace() for c in host):
        raise ConfigError(f"{where} = {value!r} should be HOST or HOST:PORT (e.g. bookie1.example.com or 10.0.0.5:3181)")
    if is_wildcard(host):
        raise ConfigError(
            f"{where} = {value!r} is a wildcard: other machines cannot connect to it; "
            f"give this machine's name or address"
        )
    if not port_text:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise ConfigError(f"{where} = {value!r}: the port should be a number from 1 to 65535")
    return host, int(port_text)



def _address(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    """A validator: empty, ``HOST`` or ``HOST:PORT``."""
    if value.strip():
        split_address(value, attribute.name)


@attrs.frozen
class NoConfig:
    """The config class of a component that takes no keys (besides ``plugin``)."""


@attrs.frozen
class BookieConfig:
    host: str = "127.0.0.1"
    port: int = attrs.field(default=3181, validator=between(0, 65535))
    data_dir: Path = attrs.field(default=Path("data"), converter=Path)
    #: Metadata store URI; empty means the bookie does not register anywhere.
    metadata: str = ""
    #: Largest entry accepted, in bytes; a larger ADD gets BAD_REQUEST. Clients refuse a
    #: larger entry before sending it by their own ``max_entry_size`` setting (keep the two equal).
    max_entry_size: int = attrs.field(default=DEFAULT_MAX_ENTRY_SIZE, validator=at_least(1))
    #: Seconds live connections get to finish in-flight requests on shutdown.
    drain_timeout_s: float = attrs.field(default=5.0, validator=at_least(0))
    #: Seconds between checkpoints (flush ledger storage, persist LastLogMark, trim journal).
    checkpoint_interval_s: float = attrs.field(default=30.0, validator=above(0))
    #: Frames (request batches) a connection may have awaiting their responses.
    max_pending_batches: int = attrs.field(default=64, validator=at_least(1))
    #: The id the bookie registers with. Default: the id its data dir's cookie records (the
    #: bookie's first start stamped it), else ADVERTISED_HOST:PORT -- stable across restarts,
    #: unique per machine.
    bookie_id: str = ""
    #: What clients and other bookies connect to (BookKeeper's advertisedAddress): ``HOST`` or
    #: ``HOST:PORT``. Default: ``host`` when it is a specific address; with a wildcard ``host``
    #: (0.0.0.0), the machine's hostname if it resolves to an address that is not loopback,
    #: else its primary address. A bookie never registers 0.0.0.0.
    advertised_address: str = attrs.field(default="", validator=_address)
    #: On a cookie mismatch (data dir missing or replaced): re-stamp and start instead of refusing.
    auto_fix_cookies: bool = False
    #: BP-46: after an unclean shutdown or a replaced data dir, fence and put in limbo the
    #: ledgers that may have lost writes here, and repair them. Off only to demonstrate
    #: what it prevents (tests of BP-46 scenarios 1 and 2).
    data_loss_protection: bool = True
    #: Seconds between garbage collections (with a metadata store): ledgers deleted from
    #: the store are deleted here and entry logs no ledger uses any more are removed.
    gc_interval_s: float = attrs.field(default=60.0, validator=above(0))
    #: A dead bookie's registration disappears from the metadata store after about this long.
    registration_ttl_s: float = attrs.field(default=6.0, validator=above(0))
    #: The first add or fence of a ledger not held here waits for the metadata store to vouch
    #: for its key at most this long; then a client that understands it is answered
    #: TRY_AGAIN and sends it again (a slow store is not a dead bookie). Keep it below the
    #: clients' add timeout.
    key_check_wait_s: float = attrs.field(default=1.0, validator=at_least(0))
    #: A ledger this bookie deleted (garbage collection) is remembered this long, so that its
    #: old writer's adds are refused instead of creating it again (a week by default).
    deleted_ledger_retention_s: float = attrs.field(default=7 * 24 * 3600.0, validator=above(0))
    #: Read-only mode (BookKeeper's diskUsageThreshold): once this fraction of the data
    #: dir's filesystem is used, the bookie takes no more adds and registers read-only.
    disk_usage_threshold: float = attrs.field(default=0.95, validator=[above(0), at_most(1)])
    #: ...and takes adds again once usage is below this fraction (diskUsageLwm).
    disk_usage_lwm: float = attrs.field(default=0.90)
    #: Seconds between disk usage checks (diskCheckInterval).
    disk_check_interval_s: float = attrs.field(default=10.0, validator=above(0))
    #: Space kept back on each filesystem the bookie writes (a file ``.reserved-space``), for
    #: fences, recovery adds and the LastLogMark once a write finds the disk full; at most
    #: 2.5 % of the filesystem and half the room ``disk_usage_threshold`` leaves (see
    #: docs/reliability.md).
    reserved_space_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=at_least(0))
    #: The rack (failure domain) label the bookie registers with, for rack-aware placement.
    rack: str = ""

    @disk_usage_lwm.validator
    def _lwm_below_threshold(self, attribute: attrs.Attribute[float], value: float) -> None:
        if not 0 < value <= self.disk_usage_threshold:
            raise ValueError(
                f"disk_usage_lwm = {value} must be above 0 and at most disk_usage_threshold = "
                f"{self.disk_usage_threshold} (the bookie leaves read-only mode below it)"
            )


@attrs.frozen
class PluginsConfig:
    """``[plugins]``: which installed plugins (entry points) to leave out."""

    #: Entry-point names of third-party plugins not to load (``bkframe plugins`` lists them);
    #: ``$BKFRAME_DISABLE_PLUGINS`` (comma-separated) adds to it. Built-ins cannot be disabled.
    disable: tuple[str, ...] = ()


@attrs.frozen
class HttpConfig:
    """``[http]``: the bookie's admin HTTP service (status page, metrics, admin API)."""

    enabled: bool = False
    host: str = "127.0.0.1"
    #: 0 picks a free port (printed as "admin http on URL").
    port: int = attrs.field(default=8000, validator=between(0, 65535))
    #: Protect every endpoint but /heartbeat with the bookie's ``[auth]`` provider: a request
    #: carries ``Authorization: METHOD CREDENTIAL`` (``Bearer`` counts as ``token``), checked
    #: as a connection's AUTH request is (docs/admin.md).
    require_auth: bool = False


@attrs.frozen
class AutorecoveryConfig:
    """``[autorecovery]``: the auditor and a replication worker inside the bookie (the same
    keys configure ``bkframe autorecovery`` run alone). See docs/autorecovery.md."""

    #: Run the auditor election and a replication worker in this bookie (needs a metadata store).
    enabled: bool = False
    #: A bookie whose registration has been gone this long is lost: its ledgers are marked
    #: under-replicated (a decommissioned bookie's at once).
    lost_bookie_grace_s: float = attrs.field(default=30.0, validator=at_least(0))
    #: An open ledger's last fragment is re-replicated (after recovering and closing the
    #: ledger, which fences its writer) only once it has been marked this long.
    open_ledger_rereplication_grace_s: float = attrs.field(default=30.0, validator=at_least(0))
    #: Seconds between full checks (every ledger's metadata checked against the live bookies,
    #: and LIST_ENTRIES on every replica of every ledger); 0: never (a new auditor still checks
    #: every ledger's ensembles once). A day, as BookKeeper's periodic bookie check.
    audit_interval_s: float = attrs.field(default=86400.0, validator=at_least(0))
    #: The full checks' pace: at most this many ledgers' metadata read per second.
    full_check_reads_per_s: float = attrs.field(default=500.0, validator=above(0))
    #: Seconds between the auditor's rounds and every auditor candidate's looks at the bookie
    #: set, and between a worker's looks for under-replicated ledgers when it has nothing to do.
    check_interval_s: float = attrs.field(default=1.0, validator=above(0))
    #: The auditor's lock and a worker's claim on a ledger vanish about this long after their
    #: holder dies.
    lock_ttl_s: float = attrs.field(default=6.0, validator=above(0))
    #: Deadline of each metadata request and of each bookie request of a copy.
    request_timeout_s: float = attrs.field(default=30.0, validator=above(0))
    #: A ledger that cannot be repaired yet is retried after a back-off that doubles up to this.
    max_retry_s: float = attrs.field(default=30.0, validator=above(0))
    #: Ledgers one worker (a bookie's, or one ``bkframe autorecovery``) re-replicates at once.
    parallel_ledgers: int = attrs.field(default=4, validator=at_least(1))


@attrs.frozen
class SubscriptionsConfig:
    """``[subscriptions]``: the subscription owners this bookie hosts, which consumers reach
    over the bookie protocol (docs/subscriptions.md, "Which process owns it"). Needs a
    metadata store."""

    #: Host the owners of the subscriptions consumers ask this bookie for.
    enabled: bool = True
    #: An owner's lock vanishes about this long after its bookie dies; then another bookie
    #: takes the subscription over. Keep it well below the subscriptions' lease times.
    owner_ttl_s: float = attrs.field(default=10.0, validator=above(0))
    #: Subscriptions this bookie owns at most; a consumer of one more is sent to another bookie.
    max_owners: int = attrs.field(default=1000, validator=at_least(1))
    #: SUB_LEASE requests waiting for records at once on this bookie; one more is served
    #: without waiting (an empty answer, which a consumer takes as a wait that timed out).
    max_waiting_leases: int = attrs.field(default=10_000, validator=at_least(0))
    #: SUB_* requests under way on one connection; one more is answered TOO_MANY_REQUESTS.
    max_calls_per_connection: int = attrs.field(default=1024, validator=at_least(1))
    #: A SUB_LEASE waits at most this long for records, whatever it asked for.
    max_lease_wait_s: float = attrs.field(default=60.0, validator=at_least(0))
    #: Deadline of each call to an owner (beyond a lease's wait); then IO_ERROR, and the
    #: consumer asks again.
    call_timeout_s: float = attrs.field(default=30.0, validator=above(0))


@attrs.frozen
class OffloadConfig:
    """``[offload]``: the offload service (docs/tiered-storage.md, "The offload service"):
    ``bkframe offloader --config`` reads it, and ``bkframe autorecovery`` (alone or in a
    bookie) runs the service too when ``enabled``. The defaults apply to logs that set none
    of their own (``log create`` / ``log configure``); a log with no tier, its own or
    ``tier``, is never offloaded."""

    #: Run the offload service beside autorecovery (``bkframe autorecovery``, or a bookie
    #: with ``[autorecovery] enabled``); ``bkframe offloader`` runs it whatever this says.
    enabled: bool = False
    #: The tier (URI) of logs that name none; "": such logs are not offloaded.
    tier: str = ""
    #: A closed segment this old (s, as retention counts age) is offloaded; 0: not by age.
    after_s: float = attrs.field(default=0.0, validator=at_least(0))
    #: The oldest closed segments are offloaded while a log holds more than this many bytes
    #: not offloaded yet; 0: not by size.
    beyond_bytes: int = attrs.field(default=0, validator=at_least(0))
    #: An offloaded segment's ledger is deleted from the bookies this long after its offload.
    deletion_lag_s: float = attrs.field(default=4 * 3600.0, validator=at_least(0))
    #: Seconds between the starts of two passes over the logs.
    interval_s: float = attrs.field(default=60.0, validator=above(0))
    #: A log's lock (one offloader per log) vanishes about this long after its holder dies.
    lock_ttl_s: float = attrs.field(default=30.0, validator=above(0))
    #: Deadline of each metadata request (and of each bookie read, through the client).
    request_timeout_s: float = attrs.field(default=30.0, validator=above(0))
    #: Deadline of each tier call, plus the time its bytes take at 1 MiB/s.
    tier_timeout_s: float = attrs.field(default=60.0, validator=above(0))
    #: A tier that failed is left alone for a back-off that starts here and doubles up to
    #: ``max_backoff_s`` while it keeps failing.
    min_backoff_s: float = attrs.field(default=5.0, validator=above(0))
    max_backoff_s: float = attrs.field(default=300.0, validator=above(0))
    #: Where a segment's Parquet file is written before its put ("": the system's temporary
    #: directory); it needs room for the largest segment.
    spool_dir: str = ""
    #: Seconds between two orphan sweeps of each tier the service has seen (objects no log
    #: names, docs/tiered-storage.md "Nothing leaks"); 0: never.
    sweep_interval_s: float = attrs.field(default=3600.0, validator=at_least(0))
    #: An object no log names is deleted once it is this old: longer than any offload's put
    #: to its metadata commit.
    orphan_grace_s: float = attrs.field(default=6 * 3600.0, validator=at_least(0))
    #: ``bkframe offloader`` also compacts, each pass, the logs with ``compaction = key``
    #: whose dirty part reached their ``min_dirty_ratio`` (docs/compaction.md; a log with a
    #: password is left to ``bkframe log compact --password``).
    compaction: bool = True
    #: Memory (MiB) of a compaction's key index; beyond it the index spills to ``spool_dir``.
    compaction_memory_mb: int = attrs.field(default=64, validator=above(0))
    #: The cluster's defaults of the compaction settings a log leaves unset (its
    #: ``min_compaction_lag_s``, ``tombstone_retention_s``, ``min_dirty_ratio``).
    compaction_lag_s: float = attrs.field(default=0.0, validator=at_least(0))
    tombstone_retention_s: float = attrs.field(default=24 * 3600.0, validator=at_least(0))
    min_dirty_ratio: float = attrs.field(default=0.5, validator=at_least(0))


@attrs.frozen
class LimitsConfig:
    """``[limits]``: what clients, hostile or not, may make a bookie hold (docs/security.md,
    "Hostile clients"). Each limit answers the client that meets it, or closes its connection,
    and never slows the clients below it."""

    #: Connections open at once; one more is refused (an error frame, then closed).
    max_connections: int = attrs.field(default=4096, validator=at_least(1))
    #: Connections open at once from one peer address (IP).
    max_connections_per_address: int = attrs.field(default=256, validator=at_least(1))
    #: Seconds a connection has to authenticate when ``[auth]`` requires it; then it is closed.
    auth_timeout_s: float = attrs.field(default=10.0, validator=above(0))
    #: Long polls (READ_LAC with LONG_POLL) one connection may have waiting; one more is
    #: answered at once with the current LAC, as if it had timed out.
    max_long_polls_per_connection: int = attrs.field(default=1024, validator=at_least(0))
    #: Long polls waiting on the whole bookie (each costs a few hundred bytes while it waits).
    max_long_polls: int = attrs.field(default=100_000, validator=at_least(0))
    #: The longest a long poll waits; a longer timeout asked for is cut to this.
    max_long_poll_timeout_s: float = attrs.field(default=60.0, validator=at_least(0))
    #: Bytes of request frames read (or being read) and not answered yet, with their queued
    #: answers, over all connections. When it is spent, connections stop reading until answers
    #: are sent (a frame larger than it is read alone).
    max_inflight_bytes: int = attrs.field(default=256 * 1024 * 1024, validator=at_least(1024 * 1024))
    #: ...of which the connections from one peer address (IP) may hold this much.
    max_inflight_bytes_per_address: int = attrs.field(default=64 * 1024 * 1024, validator=at_least(1024 * 1024))
    #: Seconds a frame may take to arrive whole once its first bytes did; then the connection
    #: is closed (its memory is held for it meanwhile).
    frame_timeout_s: float = attrs.field(default=60.0, validator=above(0))
    #: Seconds a client may take to read an answer the bookie sends; then the connection is
    #: closed (a client that never reads its answers holds their memory).
    send_timeout_s: float = attrs.field(default=60.0, validator=above(0))


@attrs.frozen
class Config:
    bookie: BookieConfig
    journal: Mapping[str, Any]
    ledger_storage: Mapping[str, Any]
    entry_log_manager: Mapping[str, Any]
    plugins: PluginsConfig = PluginsConfig()
    autorecovery: AutorecoveryConfig = AutorecoveryConfig()
    offload: OffloadConfig = OffloadConfig()
    subscriptions: SubscriptionsConfig = SubscriptionsConfig()
    source: str = "(defaults)"
    #: ``[placement]``: ``policy`` (a registered placement policy's name) and its options,
    #: for the client inside the bookie (repair, re-replication); validated by the policy's
    #: config class when the plugin manager makes it (:meth:`PluginManager.check_config`).
    placement: Mapping[str, Any] = attrs.field(factory=lambda: {"policy": DEFAULT_POLICY})
    #: ``[tls]``: the bookie's certificate, for its server and its own client connections.
    tls: TLSConfig = attrs.field(factory=TLSConfig)
    #: ``[auth]``: ``provider`` (a registered auth provider's name) and its options;
    #: validated by the provider's config class (:meth:`PluginManager.check_config`).
    auth: Mapping[str, Any] = attrs.field(factory=lambda: {"provider": DEFAULT_AUTH_PROVIDER})
    #: ``[logging]``: level and format of the bookie's log (the CLI's too).
    logging: LoggingConfig = attrs.field(factory=LoggingConfig)
    http: HttpConfig = HttpConfig()
    limits: LimitsConfig = LimitsConfig()


def load_config(
    path: Path | None = None, overrides: Mapping[str, Any] | None = None, http: Mapping[str, Any] | None = None
) -> Config:
    """Read ``path`` (or use defaults), apply ``[bookie]`` overrides and ``http`` overrides,
    validate ``[bookie]``, ``[plugins]``, ``[tls]``, ``[logging]``, ``[http]``, ``[limits]`` and
    ``[subscriptions]`` (the component sections are validated by the components' classes when the plugin manager makes them:
    :meth:`PluginManager.check_config` does it at once)."""
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
    known = {
        "bookie", "plugins", "placement", "tls", "auth", "logging", "http", "autorecovery", "offload", "limits",
        "subscriptions", *PLUGIN_SECTIONS,
    }
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for section in known:
        if section in raw and not isinstance(raw[section], dict):
            raise ConfigError(f"{source}: [{section}] should be a table")
    bookie_raw = _overridden(BookieConfig, raw.get("bookie", {}), overrides, where=f"{source}: [bookie]", flag="--{}")
    sections = {s: {**DEFAULT_SECTIONS[s], **raw.get(s, {})} for s in PLUGIN_SECTIONS}
    tls = parse_section(TLSConfig, raw.get("tls", {}), where=f"{source}: [tls]")
    tls.check(f"{source}: [tls]")
    http_raw = _overridden(HttpConfig, raw.get("http", {}), http, where=f"{source}: [http]", flag="--http-{}")
    return Config(
        bookie=parse_section(BookieConfig, bookie_raw, where=f"{source}: [bookie]"),
        plugins=parse_section(PluginsConfig, raw.get("plugins", {}), where=f"{source}: [plugins]"),
        autorecovery=parse_section(AutorecoveryConfig, raw.get("autorecovery", {}), where=f"{source}: [autorecovery]"),
        offload=parse_section(OffloadConfig, raw.get("offload", {}), where=f"{source}: [offload]"),
        subscriptions=parse_section(SubscriptionsConfig, raw.get("subscriptions", {}), where=f"{source}: [subscriptions]"),
        source=source,
        placement={"policy": DEFAULT_POLICY, **raw.get("placement", {})},
        tls=tls,
        auth={"provider": DEFAULT_AUTH_PROVIDER, **raw.get("auth", {})},
        logging=parse_section(LoggingConfig, raw.get("logging", {}), where=f"{source}: [logging]"),
        http=parse_section(HttpConfig, http_raw, where=f"{source}: [http]"),
        limits=parse_section(LimitsConfig, raw.get("limits", {}), where=f"{source}: [limits]"),
        **sections,
    )


def _overridden(
    cls: type[Any], section: Mapping[str, Any], overrides: Mapping[str, Any] | None, *, where: str, flag: str
) -> dict[str, Any]:
    """The keys of a file's section with the command line's overrides (None: not given) in.

    A flag never hides a mistake of the file: the file's section is checked on its own
    first. Then each flag is checked as that key of the file would be, and a refusal names
    the flag (``flag`` formats it from the key: ``--{}`` gives ``--port: port = 70000 should
    be an integer from 0 to 65535``)."""
    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    if given:
        parse_section(cls, section, where=where)
        for key, value in given.items():
            name = flag.format(key.replace("_", "-"))
            parse_section(cls, {**section, key: value}, where=name)
    return {**section, **given}
