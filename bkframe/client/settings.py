"""The client's tunables: timeouts at every call site, speculative reads, quarantine.

Defaults follow BookKeeper's client (``addEntryTimeoutSec`` 5, ``readEntryTimeoutSec`` 5,
``speculativeReadTimeout`` 2000 ms, ``clientConnectTimeoutMillis`` 10000,
``bookieQuarantineTimeSeconds`` 1800), so a hung bookie costs a writer or reader seconds,
never forever.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import attrs
from attrs import validators as v

from bkframe.core.config import DEFAULT_MAX_ENTRY_SIZE, Config
from bkframe.core.interfaces.auth import internal_credential
from bkframe.core.interfaces.placement import DEFAULT_POLICY
from bkframe.errors import ConfigError
from bkframe.proto.codes import MAX_ENTRY_SIZE
from bkframe.proto.tls import client_context


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0 seconds, got {value!r}")


@attrs.frozen
class ClientSettings:
    """Pass to :func:`bkframe.open_client` as keywords: ``open_client(uri, add_timeout_s=2)``."""

    #: An add a bookie has not answered within this long counts as that bookie's failure:
    #: a PD_JOURNAL writer replaces it (ensemble change), other types fail the writer.
    add_timeout_s: float = attrs.field(default=5.0, validator=_positive)
    #: A read, fence, LAC read, sync or recovery read unanswered this long counts as an error
    #: of that bookie (the next replica is tried).
    read_timeout_s: float = attrs.field(default=5.0, validator=_positive)
    #: A request a bookie answered TRY_AGAIN (it cannot decide yet: its metadata store has not
    #: vouched for a new ledger's key within its ``key_check_wait_s``) is sent again to that
    #: bookie, each try with its own add or read timeout, until this long after it was first
    #: sent; then it counts as that bookie's failure. The bookie itself gives up after 10 s.
    try_again_timeout_s: float = attrs.field(default=15.0, validator=_positive)
    #: A read not answered this long is also sent to the next replica, and the first valid
    #: answer wins (BookKeeper's speculative read); 0 turns speculation off.
    speculative_read_timeout_s: float = attrs.field(default=2.0, validator=v.ge(0))
    #: Opening a TCP connection to a bookie gives up after this long.
    connect_timeout_s: float = attrs.field(default=10.0, validator=_positive)
    #: Under asyncio, plaintext connections run on asyncio's own transport
    #: (:mod:`bkframe.client.bookies.asyncio_stream`: fewer layers, less CPU per request);
    #: False runs them on anyio's stream, as trio and TLS connections always do
    #: (benchmarks/asyncio_stream.py compares the two).
    asyncio_transport: bool = True
    #: A log writer's rollover whose new segment is not in the log record this long after
    #: the switch fails the writer (a store that does not answer; its own clients retry for
    #: ~30 s), and so does each update of the log record it makes (docs/logs.md).
    metadata_timeout_s: float = attrs.field(default=10.0, validator=_positive)
    #: The longest one call to an object-store tier may take (plus the time its bytes take
    #: at 1 MiB/s) before it is abandoned as a TierError: a read of an offloaded segment then
    #: falls back to the bookies or fails, instead of waiting out the store's own retries.
    tier_timeout_s: float = attrs.field(default=30.0, validator=_positive)
    #: A bookie that failed a request is avoided for this long when choosing ensembles and
    #: replicas; it is still used when no other bookie is available.
    bookie_quarantine_s: float = attrs.field(default=1800.0, validator=v.ge(0))
    #: The largest entry (header, digest and payload) a writer sends, in bytes: keep it equal
    #: to the bookies' ``[bookie] max_entry_size`` (both 5 MiB by default). A larger append
    #: raises :class:`~bkframe.errors.EntryTooLargeError` before anything is sent, and the
    #: writer goes on; at most ``proto.MAX_ENTRY_SIZE`` (what one frame can carry).
    max_entry_size: int = attrs.field(
        default=DEFAULT_MAX_ENTRY_SIZE, validator=[v.ge(1), v.le(MAX_ENTRY_SIZE)]
    )
    #: > 0: write handles send their LAC explicitly when it moved and no add carried it for
    #: this long, so tailing readers see the last entry without waiting for the next.
    explicit_lac_interval_s: float = attrs.field(default=0.0, validator=v.ge(0))
    #: New ledgers choose among the registered bookies as the client listed them at most
    #: this long ago (re-listed in the background past half of it): a create costs no
    #: listing, a new bookie is chosen within this long, a read-only one left within this
    #: long. Ensemble changes, recovery and re-replication list them afresh. 0: every create
    #: lists them.
    bookie_set_max_age_s: float = attrs.field(default=2.0, validator=v.ge(0))
    #: Ledger ids are taken from the metadata store in blocks of up to this many (growing
    #: from 1 by doubling), one round trip per block instead of one per create; ids a
    #: client took and did not use when it closes are skipped (ids are unique, not dense).
    ledger_id_block: int = attrs.field(default=100, validator=v.ge(1))
    #: A log cursor's acks are stored at most once per this long (the newest position);
    #: 0 stores every ack at once. A crash loses the acks since the last store: those
    #: entries are delivered again (see docs/logs.md#cursors).
    cursor_flush_interval_s: float = attrs.field(default=1.0, validator=v.ge(0))
    #: Where the owner of a subscription this client consumes runs (docs/subscriptions.md):
    #: ``bookies`` (a bookie hosts it; every process consumes over the wire) or ``local``
    #: (this client owns it; consumers in other processes wait until it gives it up).
    subscription_owner: str = attrs.field(default="bookies", validator=v.in_(("bookies", "local")))
    #: A subscription this client owns (docs/subscriptions.md) is taken over by another
    #: process this long after this one stops renewing its lock (it died, hung or was cut off).
    subscription_owner_ttl_s: float = attrs.field(default=10.0, validator=v.gt(0))
    #: How long a consumer's call waits for its subscription to have an owner it can reach
    #: (a failover) before it raises :class:`~bkframe.errors.NotOwnerError`.
    subscription_wait_s: float = attrs.field(default=60.0, validator=v.gt(0))
    #: The placement policy choosing bookies for new ledgers, ensemble changes and
    #: re-replication, by registered name: ``random``, ``least_used``, ``rack_aware``, or a
    #: plugin's (see docs/placement.md).
    placement: str = DEFAULT_POLICY
    #: The policy's options (``rack_aware``: ``min_racks``, ``enforce_min_racks``);
    #: :func:`bkframe.open_client` puts here every keyword that is no field of this class.
    placement_options: Mapping[str, Any] = attrs.field(factory=dict, converter=dict)
    #: TLS: the PEM CA bundle that signs the bookies' certificates; set, every connection is
    #: TLS (bookies with ``[tls] enabled``). Empty: plaintext.
    tls_ca: str = ""
    #: The client's own PEM certificate and key, for bookies with ``require_client_cert``.
    tls_cert: str = ""
    tls_key: str = attrs.field(default="")
    #: The token sent in each connection's AUTH request (bookies with ``[auth] provider =
    #: "token"``). A secret: never shown in a repr or a log line.
    auth_token: str = attrs.field(default="", repr=False)
    #: What the client sends in AUTH when it is not a token: (method, credential). A
    #: bookie's own client, and autorecovery, send the cluster-internal one (see
    #: :meth:`for_bookie`, :meth:`as_internal`).
    auth_credential: tuple[str, bytes] = attrs.field(default=("none", b""), repr=False)

    @tls_key.validator
    def _tls_pair(self, attribute: attrs.Attribute[str], value: str) -> None:
        if bool(self.tls_cert) != bool(value):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        if self.tls_cert and not self.tls_ca:
            raise ValueError("tls_cert needs tls_ca (the CA that signs the bookies' certificates)")

    @property
    def auth(self) -> tuple[str, bytes]:
        """The (method, credential) of each connection's AUTH request."""
        return ("token", self.auth_token.encode()) if self.auth_token else self.auth_credential

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of the client's connections (None: plaintext)."""
        if not self.tls_ca:
            return None
        try:
            return client_context(self.tls_ca, self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"client TLS settings (tls_ca, tls_cert, tls_key): {e}") from None

    def as_internal(self, secret: bytes) -> ClientSettings:
        """These settings authenticating as the cluster's own process (AUTH
        ``bkframe-internal`` with the cluster-internal ``secret``) rather than with a token."""
        return attrs.evolve(self, auth_token="", auth_credential=internal_credential(secret))

    @classmethod
    def for_bookie(cls, config: Config, auth_credential: tuple[str, bytes]) -> ClientSettings:
        """The settings of a bookie's own client (limbo repair, recovery, re-replication):
        its placement, its ``[tls]`` certificate toward its peers (which share its ``[tls]``
        CA) and its auth credential (the cluster-internal one, ``Bookie.own_credential``)."""
        tls = config.tls
        fields: dict[str, Any] = {"auth_credential": auth_credential}
        if tls.enabled:
            fields.update(tls_ca=str(tls.ca), tls_cert=str(tls.cert), tls_key=str(tls.key))
        return cls.from_placement_section(config.placement, **fields)

    @classmethod
    def from_placement_section(cls, section: Mapping[str, Any], **fields: Any) -> ClientSettings:
        """Settings with the placement of a ``[placement]`` config section: ``policy = NAME``
        and the policy's options as the other keys (a bookie's client reads it so)."""
        options = dict(section)
        policy = options.pop("policy", DEFAULT_POLICY)
        return cls(placement=policy, placement_options=options, **fields)
