"""How a request leaves a bookie connection (client/bookies/direct_socket.py): to a nearly idle bookie
from the task that submits it, before that task yields, on asyncio's transport and on trio's
socket alike; a burst still shares frames in the send loop, the part of a large frame the
socket does not take at once goes before anything submitted after it, and answers come in
submission order. One bookie process for the module."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from bkframe.client.bookies.asyncio_stream import AsyncioStream
from bkframe.client.bookies.connection import BookieClient, connect_bookie
from bkframe.proto.codes import Op, Status
from bkframe.testing.cluster import BookieProcess

KEY = b"k" * 20
BYPASS = 2
BACKENDS = ["asyncio", "trio"]


@pytest.fixture(scope="module")
def bookie(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    b = BookieProcess(Path(tmp_path_factory.mktemp("direct-send")) / "b").start()
    try:
        yield b.host, b.port
    finally:
        b.stop()


def _socket_of(bk: BookieClient) -> Any:
    stream = bk._stream
    if isinstance(stream, AsyncioStream):
        return stream._transport.get_extra_info("socket")
    assert isinstance(stream, anyio.abc.SocketStream)
    return stream.extra(anyio.abc.SocketAttribute.raw_socket)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_request_to_an_idle_bookie_leaves_before_its_submitter_yields(bookie: tuple[str, int], backend: str) -> None:
    """The submitting task sends it: the bookie answers while that task still holds the event
    loop (it waits in ``select``), which no request left for the send loop could have."""

    async def main() -> None:
        async with connect_bookie(*bookie) as bk:
            sock = _socket_of(bk)
            for i in range(5):
                pending = bk.submit_read_lac(1000 + i)
                readable, _, _ = select.select([sock], [], [], 10)  # (blocks the loop: no task runs)
                assert readable, f"request {i}: not on the wire until the submitting task yielded"
                with anyio.fail_after(10):
                    assert (await pending.wait()).op == Op.READ_LAC

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_burst_shares_frames_and_is_answered_in_order(bookie: tuple[str, int], backend: str) -> None:
    """Forty adds submitted at once: the first go out directly (at most two: then the
    connection is a pipeline), the rest in the send loop's frames; every answer is OK, in
    submission order."""

    async def main() -> None:
        async with connect_bookie(*bookie) as bk:
            assert bk._send_now is not None
            sends = 0
            send_now = bk._send_now

            def counted(data: Any) -> int:
                nonlocal sends
                sends += 1
                return send_now(data)

            bk._send_now = counted
            ledger = 2000 + BACKENDS.index(backend)
            order: list[int] = []
            pendings = []
            for entry in range(40):
                pending = bk.submit_add(ledger, entry, b"x" * 100, master_key=KEY, ledger_type=BYPASS)
                pending.callback = lambda r, e, entry=entry: order.append(entry)
                pendings.append(pending)
            assert sends <= 2
            with anyio.fail_after(10):
                for pending in pendings:
                    assert (await pending.wait()).status == Status.OK
            assert order == list(range(40))

    anyio.run(main, backend=backend)


def test_what_the_socket_does_not_take_goes_before_what_follows(bookie: tuple[str, int]) -> None:
    """A 16 MiB ADD_BATCH sent directly is taken only in part (more than the socket buffers);
    an add submitted right after it waits behind the rest, and both are answered OK in order."""

    async def main() -> None:
        async with connect_bookie(*bookie) as bk:
            sock: socket.socket = _socket_of(bk)
            assert 16 * 1024 * 1024 > sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            entries = [bytes([i]) * (4 * 1024 * 1024) for i in range(4)]
            order: list[str] = []
            big = bk.submit_add_batch(3000, [0, 1, 2, 3], entries, master_key=KEY, ledger_type=BYPASS)
            big.callback = lambda r, e: order.append("big")
            assert bk._rest is not None, "the socket took the whole batch: nothing tested"
            small = bk.submit_add(3000, 4, b"after", master_key=KEY, ledger_type=BYPASS)
            small.callback = lambda r, e: order.append("small")
            with anyio.fail_after(30):
                assert (await big.wait()).status == Status.OK
                assert (await small.wait()).status == Status.OK
            assert order == ["big", "small"]
            read = await bk.read(3000, 2, master_key=KEY)
            assert read.status == Status.OK and bytes(read.data) == entries[2]

    anyio.run(main, backend="trio")


def test_a_pipeline_of_large_entries_goes_from_the_entries_themselves(bookie: tuple[str, int]) -> None:
    """Adds of 256 KiB submitted at once: the send loop's frames (cut near 1 MiB) go with
    ``writev`` from the entries' own buffers, not joined, through a socket that fills (32 MiB
    in all); every add is answered OK in order and reads back byte for byte."""

    async def main() -> None:
        async with connect_bookie(*bookie) as bk:
            assert bk._send_scattered is not None
            scattered = 0
            send_scattered = bk._send_scattered

            async def counted(parts: Any) -> None:
                nonlocal scattered
                scattered += 1
                await send_scattered(parts)

            bk._send_scattered = counted
            entries = [bytes([i]) * (256 * 1024) for i in range(128)]
            order: list[int] = []
            pendings = []
            for entry, data in enumerate(entries):
                pending = bk.submit_add(4000, entry, data, master_key=KEY, ledger_type=BYPASS)
                pending.callback = lambda r, e, entry=entry: order.append(entry)
                pendings.append(pending)
            with anyio.fail_after(30):
                for pending in pendings:
                    assert (await pending.wait()).status == Status.OK
                assert order == list(range(128))
                assert scattered >= 10, f"{scattered} frames went scattered"
                for entry in (5, 64, 127):
                    read = await bk.read(4000, entry, master_key=KEY)
                    assert read.status == Status.OK and bytes(read.data) == entries[entry]

    anyio.run(main, backend="trio")


def test_a_scattered_send_keeps_the_order_of_its_parts_through_a_full_socket() -> None:
    """send_scattered over a socket pair whose reader is slower than the writer: empty parts,
    views and parts larger than the socket's buffer all arrive whole and in order."""
    from bkframe.client.bookies.direct_socket import send_scattered

    parts: list[Any] = [b"", b"a" * (3 << 20), b"", memoryview(b"0123456789")[2:7], b"c" * (2 << 20), b"z"]
    expected = b"".join(bytes(p) for p in parts)

    async def main() -> None:
        left, right = socket.socketpair()
        left.setblocking(False)
        right.setblocking(False)
        received = bytearray()

        async def read() -> None:
            while len(received) < len(expected):
                await anyio.wait_readable(right)
                received.extend(right.recv(64 * 1024))
                await anyio.sleep(0)  # (slower than the writer: the socket fills)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                with anyio.fail_after(30):
                    await send_scattered(left, parts)
        finally:
            left.close()
            right.close()
        assert bytes(received) == expected

    anyio.run(main, backend="trio")
