"""A bookie connection's two sides, used by the server's reader and writer tasks
(:mod:`bkframe.bookie.serving.server`, which serves the frames):

- :class:`ConnectionReader`: what the reader keeps between frames -- its
  :class:`FrameBuffer`, the bytes of the in-flight budget it holds, its deadlines -- and how
  it receives;
- :class:`Outbox`: the sending side, shared by the reader and the writer task: answers in
  frame order, one send at a time, and no scheduler pass for a send the socket takes at once.
"""

from __future__ import annotations

import math
import os

import trio

from bkframe.core.interfaces import Buffer
from bkframe.proto.frames import FrameBuffer


class ConnectionReader:
    """What a connection's reader keeps between frames, and how it receives.

    On a plaintext connection it waits until the socket is readable, then reads it: trio's
    ``receive_some`` tries the socket first, and when nothing is there yet (one request
    in flight: the usual case) that costs a failed ``recv``, an exception and a second
    scheduler pass for every frame. After a read that filled its buffer, more is likely
    waiting: then it reads first."""

    __slots__ = ("_full", "_socket", "_stream", "auth_deadline", "frame_deadline", "frames", "held")

    def __init__(self, frames: FrameBuffer, auth_deadline: float, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._full = False
        self.frames = frames
        #: Bytes of the in-flight budget held for what ``frames`` buffers: at least that
        #: and, once a frame's header is in, the whole frame.
        self.held = 0
        #: Until AUTH succeeds (on a bookie that requires it), and until the frame under
        #: way is whole.
        self.auth_deadline = auth_deadline
        self.frame_deadline = math.inf

    async def receive(self, size: int) -> bytes | bytearray:
        """Up to ``size`` bytes; empty once the client closed its side."""
        sock = self._socket
        if sock is None:
            return await self._stream.receive_some(size)
        while True:
            if not self._full:
                await trio.lowlevel.wait_readable(sock)
            try:
                # (a connected socket's read is its recv; the number each time, as the outbox
                # takes it: -1 once closed, never another connection's reused one)
                data = os.read(sock.fileno(), size)
            except BlockingIOError:
                self._full = False  # (woken with nothing to read after all)
                continue
            except OSError as e:
                raise trio.BrokenResourceError(f"the connection failed: {e}") from e
            self._full = len(data) == size
            return data


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
