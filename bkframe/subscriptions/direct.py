"""A blocking consumer's confirmed acks, sent from the consumer's own thread over a socket of
its own to the bookie that owns the subscription (docs/subscriptions.md, "Leases, acks, nacks").

The blocking client runs its async client in a thread of its own; every blocking call hops
into that thread's event loop and back. For a confirmed ack -- one round trip per record,
the whole of a blocking worker's traffic -- that hop, the loop's tasks and its wake-ups were
most of the consumer's CPU. :class:`DirectAcks` sends the same SUB_SETTLE request on a plain
blocking socket instead and reads its answer in the calling thread: one send, one receive.

Only the happy path goes this way. Anything else -- no owner found yet, TLS, the socket
failing or timing out, any answer but OK (NOT_OWNER, a refusal, a bookie that cannot now) --
returns False and the caller acks through the async client, which finds the owner, follows
redirects and retries. An ack is idempotent at the owner (acking an acked record is not an
error), so an ack that went out here and is sent again that way is still acked once. An OK
answer means what it means on any connection: the ack is in the state ledger.
"""

from __future__ import annotations

import itertools
import logging
import socket
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any

from bkframe.client.logs.positions import Position
from bkframe.proto.codes import MAX_SUB_SETTLE, Status
from bkframe.proto.frames import FrameBuffer, pack_frame
from bkframe.proto.ops.connection_setup import encode_auth
from bkframe.proto.ops.subscription import encode_sub_settle
from bkframe.proto.table import decode_responses
from bkframe.subscriptions.remote import RemoteOwner
from bkframe.subscriptions.settings import pack

log = logging.getLogger("bkframe.subscriptions")

#: After a failed connect, acks go the async way for this long before connecting again (s).
RETRY_CONNECT_S = 5.0
_RECEIVE = 64 * 1024


class DirectAcks:
    """Confirmed acks of one consumer (``owner``: its :class:`RemoteOwner`), sent on a socket
    of their own; ``resolve(bookie_id)`` gives a bookie's address (a hop into the client's
    loop, made when the owner's bookie is first used or has moved); ``auth``: the AUTH
    request's (method, credential), as the client's connections send it."""

    def __init__(self, owner: RemoteOwner, consumer: str, resolve: Any, auth: tuple[str, bytes]) -> None:
        self.owner = owner
        self.consumer = consumer
        self._resolve = resolve
        self._auth = auth
        self._sock: socket.socket | None = None
        self._bookie: str | None = None
        self._frames = FrameBuffer()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._not_before = 0.0
        #: Acks confirmed this way, and calls that went the async way instead (for tests).
        self.sent = 0
        self.passed = 0

    def ack(self, positions: Sequence[Position]) -> bool:
        """Ack ``positions``; True once the owner confirmed it (durable), False when the
        caller must ack them the async way (nothing is known of this try)."""
        if not positions or len(positions) > MAX_SUB_SETTLE or not self._lock.acquire(blocking=False):
            self.passed += 1
            return False
        try:
            if self._ack(positions):
                self.sent += 1
                return True
        except (OSError, ValueError) as e:
            log.debug("consumer %s: a direct ack failed (%r); acking the async way", self.consumer, e)
            self._drop()
        finally:
            self._lock.release()
        self.passed += 1
        return False

    def _ack(self, positions: Sequence[Position]) -> bool:
        sock = self._connected()
        if sock is None:
            return False
        owner = self.owner
        rid = next(self._ids)
        sock.sendall(pack_frame(encode_sub_settle(
            rid, owner.log, owner.name, self.consumer, acks=[pack(p) for p in positions], password=owner.password,
        )))
        while True:
            body = self._frames.next_frame()
            if body is None:
                data = sock.recv(_RECEIVE)
                if not data:
                    raise ConnectionError("the bookie closed the connection")
                self._frames.feed(data)
                continue
            for response in decode_responses(body):
                if response.request_id == rid:
                    if response.status == Status.OK:
                        return True
                    self._drop()  # NOT_OWNER and the like: the async way finds the owner
                    return False

    def _connected(self) -> socket.socket | None:
        bookie = self.owner.bookie  # (the bookie that answered the async client last)
        if bookie is None:
            return None
        if self._sock is not None and bookie == self._bookie:
            return self._sock
        self._drop()
        if time.monotonic() < self._not_before:
            return None
        self._not_before = time.monotonic() + RETRY_CONNECT_S
        address = self._resolve(bookie)
        host, _, port = address.rpartition(":")
        timeout_s = self.owner.request_timeout_s
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # The timeouts in the kernel, the socket blocking: Python's own socket timeout
            # polls before every send and receive (two system calls more an ack). A timeout
            # raises OSError (EAGAIN): the ack goes the async way.
            sock.settimeout(None)
            timeval = struct.pack("ll", int(timeout_s), int((timeout_s % 1) * 1_000_000))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
            # AUTH first, as on every connection (no FEATURES: the bookie answers as to a
            # client of protocol version 1, never TRY_AGAIN).
            sock.sendall(pack_frame([encode_auth(0, *self._auth)]))
            frames = FrameBuffer()
            while (body := frames.next_frame()) is None:
                data = sock.recv(_RECEIVE)
                if not data:
                    raise ConnectionError("the bookie closed the connection")
                frames.feed(data)
            answer = decode_responses(body)[0]
            if answer.status != Status.OK:
                raise ConnectionError(f"the bookie refused the connection: {answer.status.name}")
        except BaseException:
            sock.close()
            raise
        self._sock, self._bookie, self._frames = sock, bookie, FrameBuffer()
        self._not_before = 0.0
        return sock

    def _drop(self) -> None:
        sock, self._sock, self._bookie = self._sock, None, None
        if sock is not None:
            sock.close()

    def close(self) -> None:
        """Close the socket (without the lock: it may run from a finalizer; an ack under way
        in another thread then fails and goes the async way)."""
        self._drop()


__all__ = ["DirectAcks"]
