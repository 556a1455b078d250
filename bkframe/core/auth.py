"""Authentication of connections to a bookie: the provider interface and the ``[auth]`` section.

A provider is a plugin component (hook ``bkframe_auth_provider``, registered by name as
placement policies are); a bookie's ``[auth] provider = NAME`` picks one and its other keys
are the provider's options. The client sends one AUTH request as the first message of each
connection (``method`` and ``credential``, as BookKeeper's AuthMessage carries an auth
plugin name and a payload); until a provider accepts it, every other request of the
connection is answered UNAUTHORIZED before any ledger is touched. The check is per
connection, never per request (see docs/security.md).
"""

from __future__ import annotations

from typing import Protocol

import attrs

from bkframe.errors import BKError

#: The provider a bookie uses without an ``[auth]`` section: every connection is accepted.
DEFAULT_PROVIDER = "none"


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
