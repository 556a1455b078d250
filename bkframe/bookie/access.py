"""Who may read a ledger on this bookie, and who may copy entries into it without its key.

Every connection has an :class:`Access`, set when its AUTH request is accepted
(:class:`~bkframe.bookie.serving.handshake.AuthGate`):

- the cluster's own processes authenticate with ``bkframe-internal`` and the cluster-internal
  secret of the metadata store's cluster record (whatever ``[auth]`` provider the bookie
  uses): they may read any ledger, and make *keyless copies* (recovery adds without a master
  key: autorecovery knows only the key's hash);
- principals listed in ``[auth] readers`` may read any ledger;
- everyone else reads a ledger only with its master key, as they add to it.

So no entry leaves a bookie for a connection that has neither the ledger's key nor a
principal allowed to read it. A connection that never authenticated (``none`` provider, no
AUTH sent) is anonymous. The keys themselves are compared in constant time; a key of a
ledger this bookie holds no key for is checked against the metadata store
(:mod:`.key_check`).
"""

from __future__ import annotations

import hmac
from collections.abc import Collection

import attrs

from bkframe.core.interfaces.auth import INTERNAL_METHOD, INTERNAL_PRINCIPAL, AuthenticationError, AuthProvider, Peer


@attrs.frozen
class Access:
    """What one connection may do beyond what a ledger's key allows."""

    #: Who the connection is (for logs).
    principal: str
    #: The cluster's own (``bkframe-internal``): reads any ledger, makes keyless copies.
    internal: bool = False
    #: Listed in ``[auth] readers``: reads any ledger.
    reads_all: bool = False
    #: The client sent FEATURES TRY_AGAIN: a request the bookie cannot decide within its
    #: ``key_check_wait_s`` is answered TRY_AGAIN rather than held (see :mod:`.key_check`).
    try_again: bool = False

    @property
    def reads_without_key(self) -> bool:
        return self.internal or self.reads_all


#: A connection that has not authenticated (a bookie whose provider requires none).
ANONYMOUS = Access("anonymous")


class AccessPolicy:
    """One bookie's rule from an accepted AUTH request to an :class:`Access`.

    :param secret: the cluster-internal secret (b"" without a metadata store: then nobody
        is internal).
    :param readers: ``[auth] readers``.
    """

    def __init__(self, secret: bytes, readers: Collection[str] = ()) -> None:
        self._secret = secret
        self._readers = frozenset(readers)

    def authenticate(self, provider: AuthProvider, peer: Peer, method: str, credential: bytes) -> Access:
        """The connection's access; :class:`AuthenticationError` refuses it."""
        if method != INTERNAL_METHOD:
            principal = provider.authenticate(peer, method, credential)
            return Access(principal, reads_all=principal in self._readers)
        # Compared whatever the lengths, in constant time: the time says nothing of the secret.
        if not self._secret or not hmac.compare_digest(credential, self._secret):
            raise AuthenticationError(
                f"the {INTERNAL_METHOD} credential is not this cluster's secret: only the cluster's own processes "
                "(bookies, autorecovery) use this method, with the secret of the metadata store's cluster record"
            )
        return Access(INTERNAL_PRINCIPAL, internal=True)
