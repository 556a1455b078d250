"""Authentication of connections to a bookie: the provider interface and the ``[auth]`` section.

A provider is a plugin component (``registry.add_auth_provider`` in the hook
``bkframe_register_components``, by name as placement policies are); a bookie's ``[auth]
provider = NAME`` picks one and its other keys are the provider's options. The client sends
one AUTH request as the first message of each connection (``method`` and ``credential``, as
BookKeeper's AuthMessage carries an auth plugin name and a payload); until a provider
accepts it, every other request of the connection is answered UNAUTHORIZED before any ledger
is touched. The check is per connection, never per request (see docs/security.md).

One method is every bookie's whatever its provider: ``bkframe-internal``, whose credential is
the cluster-internal secret of the metadata store's cluster record. The cluster's own
processes (a bookie's limbo repair, recovery and re-replication clients, autorecovery) send
it; its principal may read any ledger and copy entries without the ledger's key. ``[auth]
readers`` names principals of the provider that may read any ledger too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from bkframe.errors import BKError, ConfigError

#: The provider a bookie uses without an ``[auth]`` section: every connection is accepted.
DEFAULT_PROVIDER = "none"
#: The AUTH method of the cluster's own processes; its credential is the cluster-internal secret.
INTERNAL_METHOD = "bkframe-internal"
#: The principal of a connection that authenticated with :data:`INTERNAL_METHOD`.
INTERNAL_PRINCIPAL = "bkframe-internal"
#: The ``[auth]`` key naming principals that may read every ledger (not a provider option).
READERS_KEY = "readers"


def internal_credential(secret: bytes) -> tuple[str, bytes]:
    """The (method, credential) a cluster's own client sends: see :data:`INTERNAL_METHOD`."""
    return INTERNAL_METHOD, secret


def readers_of(section: Mapping[str, Any], *, source: str) -> frozenset[str]:
    """``[auth] readers``: principals (as the provider names them) that may read any ledger."""
    readers = section.get(READERS_KEY, [])
    if not isinstance(readers, list | tuple) or not all(isinstance(r, str) and r for r in readers):
        raise ConfigError(f"{source}: {READERS_KEY} = {readers!r} should be a list of principal names")
    return frozenset(readers)


class AuthenticationError(BKError):
    """A provider refused a connection; the message goes back to the client (never a secret)."""


@attrs.frozen
class Peer:
    """What a provider knows of the connection it authenticates."""

    #: ``HOST:PORT`` of the client.
    address: str
    #: The subject of the client's verified TLS certificate (``CN=...,O=...``), "" without one.
    certificate_subject: str = ""
    #: Whether the connection is TLS.
    tls: bool = False


class AuthProvider(Protocol):
    """Decides who may use a bookie. Made once per bookie by its registered factory."""

    #: False: connections are accepted without an AUTH request (the ``none`` provider);
    #: AUTH requests are still answered OK, so every client may send one.
    requires_auth: bool
    #: True: the provider reads the client certificate, so the bookie must require one
    #: (``[tls] require_client_cert``); checked before the bookie starts.
    needs_client_certificate: bool

    def authenticate(self, peer: Peer, method: str, credential: bytes) -> str:
        """The principal (a name for logs) of a connection whose AUTH request carried
        ``method`` and ``credential``; raises :class:`AuthenticationError` to refuse it.
        Called once per connection, on the event loop: it must not block."""
        ...

    def client_credential(self) -> tuple[str, bytes]:
        """The (method, credential) this bookie's own client sends to its peers, which use
        the same provider and options (limbo repair, recovery, re-replication)."""
        ...
