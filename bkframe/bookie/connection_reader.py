"""What a bookie connection's reader keeps between frames -- its :class:`FrameBuffer`, the
bytes of the in-flight budget it holds, its deadlines -- and how it receives (the server's
reader, :mod:`.server`, serves the frames)."""

from __future__ import annotations

import math
import os

import trio

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
