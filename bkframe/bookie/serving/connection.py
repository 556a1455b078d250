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
from collections.abc import Awaitable, Callable

import trio

from bkframe.common.socket_io import ReadWhenReadable, send_now
from bkframe.core.interfaces import Buffer
from bkframe.proto.frames import FrameBuffer


class ConnectionReader:
    """What a connection's reader keeps between frames, and how it receives: on a plaintext
    connection through :class:`~bkframe.common.socket_io.ReadWhenReadable` (no failed
    ``recv`` and second scheduler pass per frame), on TLS through the stream.

    ``receive(size)``: up to ``size`` bytes, empty once the client closed its side; an
    ``OSError`` when the connection failed (the server closes it)."""

    __slots__ = ("auth_deadline", "frame_deadline", "frames", "held", "receive")

    def __init__(self, frames: FrameBuffer, auth_deadline: float, stream: trio.abc.Stream) -> None:
        # A bound method, not a method of this class: no extra frame per receive.
        self.receive: Callable[[int], Awaitable[bytes | bytearray]] = (
            ReadWhenReadable(stream.socket, trio.lowlevel.wait_readable).receive
            if isinstance(stream, trio.SocketStream)
            else stream.receive_some
        )
        self.frames = frames
        #: Bytes of the in-flight budget held for what ``frames`` buffers: at least that
        #: and, once a frame's header is in, the whole frame.
        self.held = 0
        #: Until AUTH succeeds (on a bookie that requires it), and until the frame under
        #: way is whole.
        self.auth_deadline = auth_deadline
        self.frame_deadline = math.inf


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
            sent = send_now(self._socket, data) if self._socket is not None else 0
            if sent < len(data):
                self.sending_since = trio.current_time()
                await self.stream.send_all(memoryview(data)[sent:] if sent else data)
        finally:
            self.sending_since = math.inf
            self._lock.release()

