"""A bookie connection's byte stream on asyncio's own transport, for plaintext connections
when the client runs under asyncio.

anyio's asyncio stream is general: each ``receive`` resumes reading on the transport and
pauses it again (two ``epoll_ctl`` calls per read), and each ``send`` ends with an extra
pass of the event loop. A bookie connection reads all the time (its receive loop never
stops) and sends whole frames from one task, so this stream keeps the socket readable,
buffers what arrives up to :data:`HIGH_WATER` (then pauses reading: the bookie waits, the
client's memory stays bounded), and writes a frame straight to the transport, waiting only
while the transport's own buffer is over its high-water mark. Measured by
``bkframe bench backends`` (docs/benchmarks/event-loops.md). Under trio, and for TLS, the connection
uses anyio's streams.
"""

from __future__ import annotations

import asyncio
from collections import deque

import anyio
import anyio.abc

from bkframe.core.interfaces import Buffer

#: Bytes read and not yet taken by the receive loop above which reading pauses.
HIGH_WATER = 4 * 1024 * 1024


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False
        self.readable = asyncio.Event()
        self.writable = asyncio.Event()
        self.writable.set()
        self.lost = asyncio.Event()
        self.at_eof = False
        self.error: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        self.readable.set()
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.at_eof = True
        self.readable.set()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.error = exc
        self.at_eof = True
        self.readable.set()
        self.writable.set()
        self.lost.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()


class AsyncioStream(anyio.abc.ByteStream):
    """A TCP connection on asyncio's transport (see the module docstring)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        p = self._protocol
        while not p.chunks:
            if self._closed:
                raise anyio.ClosedResourceError
            if p.error is not None:
                raise anyio.BrokenResourceError from p.error
            if p.at_eof:
                raise anyio.EndOfStream
            p.readable.clear()
            await p.readable.wait()
        data = p.chunks.popleft()
        if p.chunks and len(data) + len(p.chunks[0]) <= max_bytes:
            parts, size = [data], len(data)  # (joined once: += would copy the bytes so far each time)
            while p.chunks and size + len(p.chunks[0]) <= max_bytes:
                parts.append(p.chunks.popleft())
                size += len(parts[-1])
            data = b"".join(parts)
        if len(data) > max_bytes:
            data, rest = data[:max_bytes], data[max_bytes:]
            p.chunks.appendleft(rest)
        p.buffered -= len(data)
        if p.paused and p.buffered <= HIGH_WATER // 2:
            p.paused = False
            self._transport.resume_reading()
        return data

    async def send(self, item: bytes) -> None:
        p = self._protocol
        if self._closed:
            raise anyio.ClosedResourceError
        if p.lost.is_set() or self._transport.is_closing():
            raise anyio.BrokenResourceError from p.error
        self._transport.write(item)
        if not p.writable.is_set():
            await p.writable.wait()
            if p.lost.is_set():
                raise anyio.BrokenResourceError from p.error

    def send_nowait(self, item: Buffer) -> int:
        """Write ``item`` to the transport now, unless its buffer is over the high-water mark
        or the connection is closing: return ``len(item)``, or 0 (then nothing was written,
        and :meth:`send` waits or says what failed)."""
        p = self._protocol
        if self._closed or p.lost.is_set() or self._transport.is_closing() or not p.writable.is_set():
            return 0
        self._transport.write(item)
        return len(item)

    async def send_eof(self) -> None:
        self._transport.write_eof()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._transport.close()
        if not self._protocol.lost.is_set():
            try:
                await self._protocol.lost.wait()
            except BaseException:
                self._transport.abort()  # cancelled (aclose_forcefully): drop what is unsent
                raise


async def connect_asyncio(host: str, port: int) -> AsyncioStream:
    """Connect to ``host:port`` on the running asyncio loop (OSError if refused)."""
    transport, protocol = await asyncio.get_running_loop().create_connection(_Protocol, host, port)
    assert isinstance(transport, asyncio.Transport)
    return AsyncioStream(transport, protocol)
