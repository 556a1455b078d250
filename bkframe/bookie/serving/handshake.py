"""What a connection goes through before its requests are served: TLS, then authentication.

:func:`open_connection` looks at the first bytes a client sends (without reading them): a TLS bookie
answers a plaintext client with a plaintext error frame ("this bookie requires TLS") and
closes; a plaintext bookie closes on a TLS ClientHello (the client's handshake then fails
at once, with a message saying so). Neither side hangs.

:class:`AuthGate` holds a connection's authentication: until the provider accepts an AUTH
request, every other request gets UNAUTHORIZED, before any ledger is touched. It is asked
for a frame while the connection is not authenticated, and for a frame that starts with
AUTH (what the connection may read and copy, :mod:`bkframe.bookie.access`, follows the AUTH accepted).
A failed AUTH ends the connection (the server sends its UNAUTHORIZED answer, then closes):
one guess per connection. Until AUTH succeeds, a frame may be at most
:data:`MAX_FRAME_BEFORE_AUTH` bytes, and the connection has ``[limits] auth_timeout_s`` to
authenticate (both enforced by the server).
"""

from __future__ import annotations

import logging
import socket
import ssl

import attrs
import trio

from bkframe.bookie.access import ANONYMOUS, AccessPolicy
from bkframe.bookie.runtime.throttled_log import ThrottledWarning
from bkframe.core.interfaces.auth import AuthenticationError, AuthProvider, Peer
from bkframe.proto.base import BadMessage
from bkframe.proto.codes import Feature, Status
from bkframe.proto.frames import pack_frame
from bkframe.proto.ops.connection_setup import AuthRequest, FeaturesRequest, encode_auth_response, encode_features_response
from bkframe.proto.table import Request, encode_error_response
from bkframe.proto.tls import TLS_HANDSHAKE, looks_like_tls, peer_principal

log = logging.getLogger("bkframe.server")

#: A client has this long to send its first bytes and finish the TLS handshake.
HANDSHAKE_TIMEOUT_S = 10.0
#: How long a refused plaintext client gets to read the error before the socket closes.
REFUSAL_LINGER_S = 2.0
#: The largest frame a connection may send before it is authenticated: room for an AUTH
#: request with the largest credential the protocol carries (16 KiB), and more. A larger
#: one is refused at its 4-byte header, before its body is read.
MAX_FRAME_BEFORE_AUTH = 64 * 1024

NOT_TLS = (
    "this bookie requires TLS: the client connected in plaintext; give the client the CA "
    "(open_client(..., tls_ca=...) or --tls-ca)"
)


async def _peek(raw: trio.SocketStream, size: int) -> bytes:
    """Up to ``size`` of the first bytes the client sent, left in the socket for the reader."""
    return await raw.socket.recv(size, socket.MSG_PEEK)


def _address(raw: trio.SocketStream) -> str:
    try:
        host, port = raw.socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


async def open_connection(
    raw: trio.SocketStream, context: ssl.SSLContext | None
) -> tuple[trio.abc.Stream, Peer] | None:
    """The stream to serve (TLS-wrapped when ``context`` is an SSL context) and who the peer
    is; None when the connection was refused (and answered, where the client can read it)."""
    address = _address(raw)
    if context is None:
        # A client may connect and stay silent a while: no timeout here (a stop cancels it).
        if looks_like_tls(await _peek(raw, 3)):
            log.warning("refused a TLS connection from %s: this bookie serves plaintext ([tls] enabled = false)", address)
            return None
        return raw, Peer(address)
    with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
        first = await _peek(raw, 3)
        if not first or first[0] != TLS_HANDSHAKE:
            if first:
                log.warning("refused a plaintext connection from %s: this bookie requires TLS", address)
                await _refuse(raw, NOT_TLS)
            return None
        stream = trio.SSLStream(raw, context, server_side=True)
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as e:
            log.warning("TLS handshake with %s failed: %s", address, e.__cause__ or e)
            return None
        subject = peer_principal(stream.getpeercert())
        return stream, Peer(address, subject, tls=True)
    log.info("no TLS handshake from %s within %s s; closing", address, HANDSHAKE_TIMEOUT_S)
    return None


async def _refuse(raw: trio.SocketStream, message: str) -> None:
    """Answer in plaintext and close gently: a close with the client's bytes unread would
    reset the connection and the client might never read the answer."""
    try:
        await raw.send_all(pack_frame([encode_error_response(0, Status.BAD_REQUEST, message)]))
        await raw.send_eof()
        with trio.move_on_after(REFUSAL_LINGER_S):
            while await raw.receive_some(64 * 1024):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


class AuthGate:
    """One connection's authentication state and its :class:`~bkframe.bookie.access.Access`."""

    def __init__(self, provider: AuthProvider, peer: Peer, policy: AccessPolicy, refusals: ThrottledWarning) -> None:
        self.provider = provider
        self.peer = peer
        self.policy = policy
        self.authenticated = not provider.requires_auth
        #: An AUTH was refused: the server closes the connection once the answer is sent.
        self.refused = False
        self.access = ANONYMOUS
        self._refusals = refusals

    @property
    def principal(self) -> str:
        return self.access.principal

    def check(self, requests: list[Request | BadMessage]) -> tuple[list[bytes], list[Request | BadMessage]]:
        """(responses to send now, requests to serve): AUTH requests that start the frame
        are answered here (also on an authenticated connection: the cluster's own processes
        authenticate on bookies whose provider requires nothing); requests before a
        successful AUTH are refused; those after it in the same frame are served; none
        after a failed AUTH."""
        answers: list[bytes] = []
        for i, req in enumerate(requests):
            if type(req) is AuthRequest:
                answers.append(self._authenticate(req))
                if self.refused:
                    return answers, []
            elif type(req) is FeaturesRequest and self.authenticated:
                answers.append(self._features(req))
            elif self.authenticated:
                return answers, requests[i:]
            else:
                message = "not authenticated: a connection's first request must be AUTH (give the client its token)"
                answers.append(encode_error_response(req.request_id, Status.UNAUTHORIZED, message))
        return answers, []

    def _authenticate(self, req: AuthRequest) -> bytes:
        try_again = self.access.try_again  # a second AUTH changes who, not what the client understands
        try:
            self.access = self.policy.authenticate(self.provider, self.peer, req.method, req.credential)
        except AuthenticationError as e:
            self._refusals.warn(
                "refused authentication from %s (method %r): %s; closing the connection", self.peer.address,
                req.method, e,
            )
            self.refused = True
            return encode_auth_response(req.request_id, Status.UNAUTHORIZED, str(e))
        self.authenticated = True
        self.access = attrs.evolve(self.access, try_again=try_again)
        log.info("connection from %s authenticated as %s", self.peer.address, self.principal)
        return encode_auth_response(req.request_id, Status.OK, self.principal)

    def _features(self, req: FeaturesRequest) -> bytes:
        """FEATURES (after AUTH, in its frame): what the client understands; the answer
        says which of those this bookie will use (bits it does not know are ignored)."""
        try_again = bool(req.features & Feature.TRY_AGAIN)
        self.access = attrs.evolve(self.access, try_again=try_again)
        return encode_features_response(req.request_id, int(Feature.TRY_AGAIN) if try_again else 0)
