"""A bookie connection's sending side, shared by its reader and its writer task
(:mod:`.server`): answers in frame order, one send at a time, and no scheduler pass for a
send the socket takes at once."""

from __future__ import annotations

import math
import os

import trio

from bkframe.core.interfaces import Buffer


class Outbox:
    """A connection's sending side, shared by its writer task and its reader.

    The reader answers a frame itself when the writer is idle (parked on an empty queue)
    and the answer waits for nothing: then no earlier answer is pending on this connection,
    so answers keep their order. The lock keeps the two from sending at once (a deferred
    answer may wake the writer while the reader sends). The reader's send is not shielded
    from stop(): a drain that catches it blocked on a full socket buffer ends the
    connection with that answer unsent, and an unanswered request acknowledged nothing.

    A send first tries the socket without waiting (plaintext connections): trio's
    ``send_all`` ends even a send the socket takes at once with a scheduler pass of its
    own, which would be one more pass per answer; only what the socket does not take goes
    through ``send_all``."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        #: The plaintext socket, for the try without waiting (None: TLS).
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        #: The writer waits for a batch and holds none.
        self.idle = False
        #: When the send under way started (inf: none is): the server closes a connection
        #: whose client takes nothing for ``send_timeout_s``.
        self.sending_since = math.inf
        self._lock = trio.Lock()

    async def send(self, data: Buffer) -> None:
        try:
            self._lock.acquire_nowait()  # the usual case: no extra scheduler pass
        except trio.WouldBlock:
            await self._lock.acquire()
        try:
            sent = self._send_now(data)
            if sent < len(data):
                self.sending_since = trio.current_time()
                await self.stream.send_all(memoryview(data)[sent:] if sent else data)
        finally:
            self.sending_since = math.inf
            self._lock.release()

    def _send_now(self, data: Buffer) -> int:
        """Bytes of ``data`` the socket took without waiting (0: none, TLS, or an error that
        ``send_all`` then raises as trio does)."""
        if self._socket is None:
            return 0
        fd = self._socket.fileno()  # each time: -1 once closed (the number may be reused)
        if fd < 0:
            return 0
        try:
            return os.write(fd, data)  # (a connected socket's write is its send)
        except OSError:  # BlockingIOError too
            return 0
