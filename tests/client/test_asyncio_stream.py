"""The bookie connection's stream on asyncio's transport: every byte arrives in order, what
is read ahead stays bounded (reading pauses, then resumes), and an end or a close is what
anyio's streams say it is. Against a real local TCP server."""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import termios
from typing import Any

import anyio
import pytest

from bkframe.client.bookies.asyncio_stream import HIGH_WATER, connect_asyncio


async def serve(payload: bytes) -> tuple[asyncio.Server, int, asyncio.Event]:
    """A server that sends ``payload``, then echoes what it reads until EOF, then closes."""
    done = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload)
        await writer.drain()
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()
        done.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], done


def unread(stream: Any) -> int:
    """Bytes that reached the stream's socket and were not read from it yet."""
    assert stream._protocol.transport is not None
    fd = stream._protocol.transport.get_extra_info("socket").fileno()
    (n,) = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))
    return int(n)


def test_bytes_arrive_in_order_and_read_ahead_is_bounded() -> None:
    async def main() -> None:
        payload = os.urandom(3 * HIGH_WATER)
        server, port, done = await serve(payload)
        async with server:
            stream = await connect_asyncio("127.0.0.1", port)
            with anyio.fail_after(30):
                while stream._protocol.buffered <= HIGH_WATER:
                    await asyncio.sleep(0.01)
                # The server keeps sending and the client has stopped reading: bytes arrive
                # and stay unread in the socket. (Polled: kit.wait_until runs on trio.)
                while not unread(stream):
                    await asyncio.sleep(0.01)
                assert stream._protocol.paused and stream._protocol.buffered < 2 * HIGH_WATER
                got = bytearray()
                while len(got) < len(payload):
                    chunk = await stream.receive(256 * 1024)
                    assert 0 < len(chunk) <= 256 * 1024
                    got += chunk
                assert bytes(got) == payload and not stream._protocol.paused
                await stream.send(b"echo me")
                echoed = b""
                while len(echoed) < 7:
                    echoed += await stream.receive()
                assert echoed == b"echo me"
                await stream.send_eof()
                with pytest.raises(anyio.EndOfStream):
                    await stream.receive()
                await done.wait()
            await stream.aclose()
            with pytest.raises(anyio.ClosedResourceError):
                await stream.send(b"late")

    asyncio.run(main())


def test_a_refused_connection_is_an_oserror() -> None:
    async def main() -> None:
        server, port, _ = await serve(b"")
        server.close()
        await server.wait_closed()
        with pytest.raises(OSError):
            await connect_asyncio("127.0.0.1", port)

    asyncio.run(main())
