"""Built-in auth providers: ``none``, ``token`` and ``tls`` (see docs/security.md).

``none`` (the default) accepts every connection. ``token`` accepts a connection whose AUTH
request carries one of a list of shared secrets (``tokens``, or ``token_file`` with one a
line), compared in constant time. ``tls`` takes the principal from the client's verified
certificate (the bookie needs ``[tls] require_client_cert = true``) and, with ``principals``,
accepts only those subjects.
"""

from __future__ import annotations

import hmac
from pathlib import Path

import attrs

from bkframe.core.config import NoConfig
from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces.auth import AuthenticationError, Peer
from bkframe.core.registry import ComponentRegistry


class NoAuth:
    """Every connection is accepted, as before authentication existed."""

    requires_auth = False
    needs_client_certificate = False

    def authenticate(self, peer: Peer, method: str, credential: bytes) -> str:
        return peer.certificate_subject or "anonymous"

    def client_credential(self) -> tuple[str, bytes]:
        return "none", b""


@attrs.frozen
class TokenConfig:
    """``[auth] provider = "token"``: the accepted tokens, inline or in a file (or both)."""

    #: Shared secrets; any one is accepted. The bookie's own client sends the first.
    tokens: tuple[str, ...] = attrs.field(default=(), repr=False)
    #: A file of tokens, one a line (blank lines and ``#`` comments ignored); keep it 0600.
    token_file: Path = attrs.field(default=Path(), converter=Path)


class TokenAuth:
    """Shared secrets: the principal is ``token #N`` (which one matched, never the token)."""

    requires_auth = True
    needs_client_certificate = False

    def __init__(self, config: TokenConfig) -> None:
        tokens = list(config.tokens)
        if config.token_file != Path():
            try:
                lines = config.token_file.read_text().splitlines()
            except OSError as e:
                raise ValueError(f"token_file = {str(config.token_file)!r} cannot be read: {e.strerror}") from None
            tokens += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        if not tokens:
            raise ValueError("the token provider needs tokens = [...] or a token_file with at least one token")
        self._tokens = [t.encode() for t in tokens]

    def authenticate(self, peer: Peer, method: str, credential: bytes) -> str:
        # Compare with every token, whatever matches first: the time taken says nothing.
        matched = -1
        for i, token in enumerate(self._tokens):
            if hmac.compare_digest(token, credential) and matched < 0:
                matched = i
        if matched < 0:
            why = "no token given" if not credential else "the token is not accepted"
            raise AuthenticationError(f"{why}: this bookie uses token authentication")
        return f"token #{matched}"

    def client_credential(self) -> tuple[str, bytes]:
        return "token", self._tokens[0]


@attrs.frozen
class TLSAuthConfig:
    """``[auth] provider = "tls"``: which certificate subjects are accepted (all if empty)."""

    #: Subjects as ``CN=alice,O=example`` (the order of the certificate's subject).
    principals: tuple[str, ...] = ()


class TLSAuth:
    """The principal is the verified client certificate's subject."""

    requires_auth = True
    needs_client_certificate = True

    def __init__(self, config: TLSAuthConfig) -> None:
        self._principals = frozenset(config.principals)

    def authenticate(self, peer: Peer, method: str, credential: bytes) -> str:
        subject = peer.certificate_subject
        if not subject:
            raise AuthenticationError("no client certificate: this bookie authenticates clients by TLS certificate")
        if self._principals and subject not in self._principals:
            raise AuthenticationError(f"principal {subject!r} is not allowed on this bookie")
        return subject

    def client_credential(self) -> tuple[str, bytes]:
        return "tls", b""


def _token(config: TokenConfig) -> TokenAuth:
    return TokenAuth(config)


def _tls(config: TLSAuthConfig) -> TLSAuth:
    return TLSAuth(config)


def _none(config: NoConfig) -> NoAuth:
    return NoAuth()


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_auth_provider("none", _none, config=NoConfig, description="accept every connection")
    registry.add_auth_provider("token", _token, config=TokenConfig, description="shared secret tokens")
    registry.add_auth_provider("tls", _tls, config=TLSAuthConfig, description="principal from the client certificate")
