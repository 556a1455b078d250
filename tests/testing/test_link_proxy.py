"""The link proxy (bkframe.testing.faults.link_proxy, link_control) on loopback: bytes pass both
ways unchanged and fast with no fault on; each fault does what it says, to the link it is
set on only; and a proxy process carries a real bookie's traffic and obeys its control
channel."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

import bkframe
from bkframe.testing.cluster import Cluster
from bkframe.testing.faults.link_control import LinkProxyError, LinkProxyProcess
from bkframe.testing.faults.link_proxy import LinkFaults, LinkProxy
from bkframe.testing.kit import wait_until
from bkframe.testing.servers import free_port


@attrs.define
class Upstream:
    """What the server behind the proxy received, per connection, and how each ended."""

    received: list[bytearray] = attrs.Factory(list)
    ended: list[str] = attrs.Factory(list)
    echo: bool = True


@asynccontextmanager
async def proxied(echo: bool = True) -> AsyncIterator[tuple[LinkProxy, tuple[str, int], Upstream]]:
    """An upstream server (echoing, or only recording) behind a proxy, both on loopback."""
    upstream = Upstream(echo=echo)

    async def serve(stream: trio.SocketStream) -> None:
        got = bytearray()
        upstream.received.append(got)
        try:
            async for data in stream:
                got += data
                if upstream.echo:
                    await stream.send_all(data)
            upstream.ended.append("eof")
        except trio.BrokenResourceError:
            upstream.ended.append("reset")

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, serve, 0)
        port = listeners[0].socket.getsockname()[1]
        proxy = LinkProxy(("127.0.0.1", port), seed=1)
        address = await nursery.start(proxy.serve, "127.0.0.1", 0)
        yield proxy, address, upstream
        nursery.cancel_scope.cancel()


async def connect(address: tuple[str, int], source: str = "127.0.0.1") -> trio.SocketStream:
    sock = trio.socket.socket()
    await sock.bind((source, 0))
    await sock.connect(address)
    return trio.SocketStream(sock)


async def receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, f"EOF after {len(data)} of {size} bytes"
        data += chunk
    return bytes(data)


async def test_with_no_fault_bytes_pass_both_ways_unchanged_and_fast() -> None:
    payload = bytes(range(256)) * (32 * 4096)  # 32 MiB
    async with proxied() as (proxy, address, _):
        stream = await connect(address)
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, payload)
            echoed = await receive_exactly(stream, len(payload))
        seconds = time.monotonic() - started
        await stream.aclose()
    assert echoed == payload
    # 32 MiB each way in one process with its echo server: tens of MB/s on a busy 2-core
    # machine, several times what a fault run's bookies carry.
    mb_s = 2 * len(payload) / seconds / 1e6
    print(f"proxied echo: {mb_s:.0f} MB/s (both ways together)")
    assert mb_s > 20, f"{mb_s:.1f} MB/s through a fault-free proxy"
    assert proxy.stats["bytes_up"] == proxy.stats["bytes_down"] == len(payload)


async def test_latency_and_jitter_delay_each_direction_and_never_reorder() -> None:
    async with proxied() as (proxy, address, _):
        proxy.set_faults(LinkFaults(latency_s=0.05, jitter_s=0.03))
        stream = await connect(address)
        started = time.monotonic()
        await stream.send_all(b"ping")
        assert await receive_exactly(stream, 4) == b"ping"
        rtt = time.monotonic() - started
        assert 0.1 <= rtt < 0.1 + 0.06 + 1.0, rtt  # two one-way delays, plus jitter and a busy machine
        # Numbered messages one by one, each with its own jitter draw: they come back in order.
        sent = b"".join(b"%06d" % i for i in range(300))
        for i in range(300):
            await stream.send_all(b"%06d" % i)
            await trio.sleep(0.0005)
        assert await receive_exactly(stream, len(sent)) == sent
        await stream.aclose()


async def test_a_bandwidth_cap_paces_the_link() -> None:
    async with proxied(echo=False) as (proxy, address, upstream):
        proxy.set_faults(LinkFaults(bandwidth_bps=1_000_000))
        stream = await connect(address)
        started = time.monotonic()
        await stream.send_all(b"x" * 500_000)
        while not upstream.received or len(upstream.received[0]) < 500_000:
            await trio.sleep(0.01)
        seconds = time.monotonic() - started
        await stream.aclose()
    assert 0.45 <= seconds < 2.5, f"500 kB over a 1 MB/s link took {seconds:.2f} s"


async def test_a_blackhole_accepts_and_swallows_then_resets_what_it_broke() -> None:
    async with proxied() as (proxy, address, upstream):
        idle = await connect(address)  # sends nothing while the blackhole is on: it goes on after
        proxy.set_faults(LinkFaults(blackhole=True))
        stream = await connect(address)  # accepted
        with trio.fail_after(10):
            await stream.send_all(b"y" * (8 << 20))  # swallowed, so the sender never blocks
        # Every byte reached the proxy and went nowhere.
        await wait_until(lambda: proxy.stats["swallowed"] == 8 << 20, "the proxy to swallow every byte", 10)
        assert all(len(r) == 0 for r in upstream.received), "the upstream got bytes through a blackhole"
        proxy.clear()
        # Nothing came back either: the first thing the stream receives is the reset.
        with pytest.raises(trio.BrokenResourceError):  # the stream lost bytes: reset
            with trio.fail_after(5):
                await stream.receive_some(10)
        await idle.send_all(b"still here")
        assert await receive_exactly(idle, 10) == b"still here"
        await idle.aclose()


async def test_a_tear_forwards_half_a_write_and_closes_both_sides() -> None:
    async with proxied(echo=False) as (proxy, address, upstream):
        stream = await connect(address)
        await stream.send_all(b"whole")
        while not upstream.received or bytes(upstream.received[0]) != b"whole":
            await trio.sleep(0.01)
        proxy.set_faults(LinkFaults(tear=True))
        frame = b"F" * 1000
        await stream.send_all(frame)
        with trio.fail_after(5):
            while not upstream.ended:
                await trio.sleep(0.01)
            rest = await stream.receive_some(10)
        assert rest == b""  # the client sees the connection closed
        got = bytes(upstream.received[0])
        assert got.startswith(b"whole") and 0 < len(got) - 5 < len(frame), f"{len(got) - 5} of {len(frame)} bytes arrived"
        assert proxy.stats["tears"] == 1


async def test_a_reset_resets_open_connections_and_new_ones_and_only_on_its_link() -> None:
    async with proxied() as (proxy, address, _):
        other = await connect(address, source="127.0.0.2")
        victim = await connect(address)
        await victim.send_all(b"hello")
        assert await receive_exactly(victim, 5) == b"hello"
        proxy.set_faults(LinkFaults(reset=True), peer="127.0.0.1")
        with pytest.raises(trio.BrokenResourceError) as raised, trio.fail_after(5):
            await victim.receive_some(10)
        assert isinstance(raised.value.__cause__, ConnectionResetError)
        fresh = await connect(address)  # accepted by the kernel, then reset
        with pytest.raises(trio.BrokenResourceError), trio.fail_after(5):
            await fresh.receive_some(10)
        await other.send_all(b"other link")  # another peer's link is untouched
        assert await receive_exactly(other, 10) == b"other link"
        proxy.clear("127.0.0.1")
        again = await connect(address)
        await again.send_all(b"back")
        assert await receive_exactly(again, 4) == b"back"
        for s in (other, again):
            await s.aclose()


async def test_a_connection_to_a_dead_upstream_is_reset() -> None:
    proxy = LinkProxy(("127.0.0.1", free_port()))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(proxy.serve, "127.0.0.1", 0)
        stream = await connect(address)
        with pytest.raises(trio.BrokenResourceError), trio.fail_after(10):
            await stream.receive_some(10)
        assert proxy.stats["refused"] == 1
        nursery.cancel_scope.cancel()


def test_faults_are_checked() -> None:
    with pytest.raises(ValueError, match="latency_s"):
        LinkFaults(latency_s=-1)
    with pytest.raises(ValueError, match="unknown link fault"):
        LinkFaults.from_json({"lag": 1})


@pytest.mark.subprocess
async def test_a_proxy_process_carries_a_real_bookies_traffic_and_obeys_its_control_channel(tmp_path: Path) -> None:
    """A bookie advertising the proxy's address: a client writes and reads a ledger through
    it; the control channel resets the link (the client's calls fail), then clears it."""
    bookie_port, proxy_port = free_port(), free_port()
    proxy = LinkProxyProcess(f"127.0.0.1:{proxy_port}", f"127.0.0.1:{bookie_port}", tmp_path / "control.sock",
                             tmp_path / "proxy.log").start()
    cluster = Cluster(tmp_path / "cluster", 1, bookie_args=(
        "--port", str(bookie_port), "--advertised-address", f"127.0.0.1:{proxy_port}"))
    try:
        cluster.start()
        assert cluster.bookies[0].address == f"127.0.0.1:{proxy_port}"
        payloads = [bytes([i % 251]) * 1024 for i in range(3000)]
        async with bkframe.open_client(cluster.metadata) as client:
            writer = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
            started = time.monotonic()
            await writer.append_many(payloads)
            rate = len(payloads) / (time.monotonic() - started)
            print(f"{rate:.0f} appends/s of 1 KiB through the proxy process")

            await writer.append(b"last")
            await writer.close()
            # The client's pooled connection is reset at once; a new one is reset too.
            reader = await client.open_ledger(writer.ledger_id, password=b"pw")
            proxy.set_faults(LinkFaults(reset=True))
            with pytest.raises(bkframe.BKError), trio.fail_after(30):
                await reader.read(0, 0)
            assert proxy.stats()["resets"] >= 1
            proxy.clear()
        async with bkframe.open_client(cluster.metadata) as client:
            reader = await client.open_ledger(writer.ledger_id, password=b"pw")
            read = [e.payload for e in await reader.read(0, len(payloads))]
            assert read == [*payloads, b"last"]
        stats = proxy.stats()
        assert stats["bytes_up"] > 3000 * 1024 and stats["bytes_down"] > 3000 * 1024, stats
        with pytest.raises(LinkProxyError, match="unknown op"):
            proxy.request({"op": "slow"})
        with pytest.raises(LinkProxyError, match="unknown link fault"):
            proxy.request({"op": "set", "faults": {"lag": 1}})
    finally:
        cluster.close()
        proxy.stop()
    with pytest.raises(LinkProxyError, match="did not answer"):
        proxy.stats()

