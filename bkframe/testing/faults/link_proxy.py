"""A user-space TCP proxy with link faults switchable at run time, for tests.

This kernel has no ``netem`` (no ``tc`` qdisc), so a slow or lossy link cannot be made in
the network stack: :class:`LinkProxy` forwards every connection to one upstream address
through trio tasks, and degrades it on the way. A *link* is the path between one peer (the
client's source address, as the proxy sees it) and the upstream; faults are set per peer
address, or for ``"*"``, every peer without faults of its own (:meth:`LinkProxy.set_faults`).

What :class:`LinkFaults` can do to a link, each direction alike:

* ``latency_s`` (one way) plus ``jitter_s`` (a uniform extra delay): each chunk read is
  delivered that much later; never reordered (a late chunk holds back the ones after it).
* ``bandwidth_bps``: bytes per second for the link, shared by its connections (the ``"*"``
  link's cap is the upstream's whole link), paced chunk by chunk.
* ``blackhole``: connections are still accepted, nothing is delivered in either direction,
  and what is sent is read and dropped (so senders never block). A connection that lost
  bytes that way cannot go on once the blackhole lifts -- a real one would have passed its
  retransmission timeout -- so it is then reset; connections that lost nothing go on.
* ``tear``: the next chunk each connection carries (either way) is cut in half: the first
  part is forwarded, then both sides are closed -- a frame torn mid-way.
* ``reset``: every connection of the link is reset at once (RST: ``SO_LINGER`` 0), and new
  ones right after they are accepted.

A connection accepted while the upstream refuses (the process behind it is down) is reset:
peers see a reset where they would have seen a refused connection. With no faults on, the
proxy only copies bytes (64 KiB reads).

As a process (``python bkframe/testing/faults/link_proxy.py --listen HOST:PORT --upstream HOST:PORT
--control PATH``; :mod:`bkframe.testing.faults.link_control` starts one and is its client) the proxy
also answers, on the Unix socket ``PATH``, a control channel of JSON lines, one request and
one answer per connection:

* ``{"op": "set", "peer": "*", "faults": {"latency_s": 0.05, ...}}`` -- the link's faults
  (:class:`LinkFaults` fields; omitted ones are off);
* ``{"op": "clear"}`` (every link) or ``{"op": "clear", "peer": ADDRESS}``;
* ``{"op": "stats"}`` -- counters (bytes forwarded each way, connections, resets, tears,
  bytes swallowed) and the faults in force.

Answers are ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. This module imports
nothing of bkframe, so that process starts quickly as a plain script.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import socket
import struct
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

#: The link every peer without faults of its own shares.
ALL_PEERS = "*"
#: Bytes read at a time from either side.
CHUNK = 65536
#: Chunks read but not yet delivered, per connection and direction (then the reader waits:
#: the sender sees a full window, as behind a slow link).
QUEUE_CHUNKS = 64
#: How long connecting to the upstream may take before the peer is reset.
CONNECT_TIMEOUT_S = 5.0
#: Paced chunks (with a bandwidth cap) carry at most this many seconds' worth of bytes.
PACING_S = 0.02
#: How long a control client may take to send its request; the largest request.
CONTROL_TIMEOUT_S = 10.0
MAX_MESSAGE = 1 << 20
UP, DOWN = 0, 1


def _non_negative(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


@attrs.frozen
class LinkFaults:
    """What a link does to the bytes it carries (see the module docstring); the default: nothing."""

    latency_s: float = attrs.field(default=0.0, validator=_non_negative)
    jitter_s: float = attrs.field(default=0.0, validator=_non_negative)
    #: Bytes per second; 0: no cap.
    bandwidth_bps: float = attrs.field(default=0.0, validator=_non_negative)
    blackhole: bool = False
    tear: bool = False
    reset: bool = False

    @property
    def clean(self) -> bool:
        return self == LinkFaults()

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LinkFaults:
        unknown = set(data) - {a.name for a in attrs.fields(cls)}
        if unknown:
            raise ValueError(f"unknown link fault(s) {sorted(unknown)}; known: {[a.name for a in attrs.fields(cls)]}")
        return cls(**data)


_EOF = object()  # the sender closed its side: pass the EOF on
_TEAR = object()  # the chunk before this one was torn: close both sides


@attrs.define(eq=False)
class _Link:
    """Shared state of one link: when each direction's capped bandwidth is free again."""

    busy_until: list[float] = attrs.Factory(lambda: [0.0, 0.0])


@attrs.define(eq=False)
class _Conn:
    peer: str
    client: trio.SocketStream
    upstream: trio.SocketStream | None = None
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    #: Bytes a blackhole swallowed: the stream is broken for good.
    poisoned: bool = False
    #: Close with RST rather than FIN.
    rst: bool = False
    #: Per direction: when the last chunk is due (chunks never overtake each other).
    last_at: list[float] = attrs.Factory(lambda: [0.0, 0.0])

    def reset(self) -> None:
        self.rst = True
        self.scope.cancel()


class LinkProxy:
    """``await nursery.start(LinkProxy(upstream=("127.0.0.1", 3181)).serve, "127.0.0.1", 0)``
    returns the (host, port) it listens on; :meth:`set_faults` and :meth:`clear` change the
    links at any time, from the proxy's trio loop."""

    def __init__(self, upstream: tuple[str, int], *, seed: int = 0) -> None:
        self.upstream = upstream
        self._faults: dict[str, LinkFaults] = {}
        self._links: dict[str, _Link] = {}
        self._conns: set[_Conn] = set()
        self._rng = random.Random(seed)
        #: connections, bytes_up, bytes_down (forwarded), swallowed, resets, tears, refused.
        self.stats: Counter[str] = Counter()

    # -- faults ----------------------------------------------------------------------------

    def faults_for(self, peer: str) -> LinkFaults:
        return self._faults.get(peer) or self._faults.get(ALL_PEERS) or LinkFaults()

    def set_faults(self, faults: LinkFaults, peer: str = ALL_PEERS) -> None:
        """The link from ``peer`` (an address, or ``"*"``: every peer without its own) now does ``faults``."""
        if faults.clean:
            self._faults.pop(peer, None)
        else:
            self._faults[peer] = faults
        self._apply()

    def clear(self, peer: str | None = None) -> None:
        """No faults on ``peer``'s link (on any link without ``peer``)."""
        if peer is None:
            self._faults.clear()
        else:
            self._faults.pop(peer, None)
        self._apply()

    def faults(self) -> dict[str, LinkFaults]:
        return dict(self._faults)

    def _apply(self) -> None:
        """Act at once on idle connections too: resets, and the end of a blackhole."""
        for conn in list(self._conns):
            faults = self.faults_for(conn.peer)
            if faults.reset or (conn.poisoned and not faults.blackhole):
                conn.reset()

    def _link(self, peer: str) -> _Link:
        key = peer if peer in self._faults else ALL_PEERS
        return self._links.setdefault(key, _Link())

    # -- serving ---------------------------------------------------------------------------

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on ``host:port`` (0: any free port) until cancelled; started with the bound address."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()
        async with trio.open_nursery() as nursery:
            task_status.started((str(bound[0]), int(bound[1])))
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            peer = str(client.socket.getpeername()[0])
        except OSError:
            return  # gone before it was served
        conn = _Conn(peer, client)
        self._conns.add(conn)
        self.stats["connections"] += 1
        try:
            with conn.scope:
                if self.faults_for(peer).reset:
                    conn.rst = True
                    return
                try:
                    with trio.fail_after(CONNECT_TIMEOUT_S):
                        conn.upstream = await trio.open_tcp_stream(*self.upstream)
                except (OSError, trio.TooSlowError):
                    self.stats["refused"] += 1
                    conn.rst = True
                    return
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, conn, client, conn.upstream, UP)
                    nursery.start_soon(self._pump, conn, conn.upstream, client, DOWN)
        except Exception as e:  # noqa: BLE001 - one connection's surprise must not stop the proxy (and every link)
            print(f"link proxy: the connection from {peer} failed: {e!r}; reset", file=sys.stderr, flush=True)
            conn.rst = True
        finally:
            self._conns.discard(conn)
            if conn.rst:
                self.stats["resets"] += 1
            for stream in (client, conn.upstream):
                if stream is not None:
                    await _close(stream, rst=conn.rst)

    async def _pump(self, conn: _Conn, src: trio.SocketStream, dst: trio.SocketStream, direction: int) -> None:
        send, receive = trio.open_memory_channel[Any](QUEUE_CHUNKS)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._deliver, conn, receive, dst, direction)
            async with send:
                await self._read(conn, src, send, direction)

    async def _read(self, conn: _Conn, src: trio.SocketStream, queue: trio.MemorySendChannel[Any], direction: int) -> None:
        while True:
            faults = self.faults_for(conn.peer)
            size = CHUNK
            if faults.bandwidth_bps:
                size = max(1024, min(CHUNK, int(faults.bandwidth_bps * PACING_S)))
            try:
                data = await src.receive_some(size)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                conn.reset()  # a reset on one side is passed on to the other
                return
            if not data:
                await queue.send(_EOF)
                return
            faults = self.faults_for(conn.peer)
            if faults.reset or (conn.poisoned and not faults.blackhole):
                conn.reset()
                return
            if faults.blackhole:
                conn.poisoned = True
                self.stats["swallowed"] += len(data)
                continue
            torn = faults.tear
            if torn:
                data = data[: len(data) // 2]
            await queue.send((self._due(conn, faults, direction, len(data)), data))
            if torn:
                self.stats["tears"] += 1
                await queue.send(_TEAR)
                return

    def _due(self, conn: _Conn, faults: LinkFaults, direction: int, size: int) -> float:
        """When a chunk of ``size`` bytes read now is delivered."""
        at = trio.current_time()
        if faults.bandwidth_bps:
            link = self._link(conn.peer)
            link.busy_until[direction] = max(at, link.busy_until[direction]) + size / faults.bandwidth_bps
            at = link.busy_until[direction]
        if faults.latency_s or faults.jitter_s:
            at += faults.latency_s + self._rng.uniform(0.0, faults.jitter_s)
        at = max(at, conn.last_at[direction])
        conn.last_at[direction] = at
        return at

    async def _deliver(
        self, conn: _Conn, queue: trio.MemoryReceiveChannel[Any], dst: trio.SocketStream, direction: int
    ) -> None:
        async with queue:
            async for item in queue:
                if item is _EOF:
                    try:
                        await dst.send_eof()
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        conn.reset()
                    return
                if item is _TEAR:
                    conn.scope.cancel()  # closed with a FIN (see _close)
                    return
                at, data = item
                await trio.sleep_until(at)
                if self.faults_for(conn.peer).blackhole:
                    conn.poisoned = True
                    self.stats["swallowed"] += len(data)
                    continue
                try:
                    await dst.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    conn.reset()
                    return
                self.stats["bytes_up" if direction == UP else "bytes_down"] += len(data)


async def _close(stream: trio.SocketStream, *, rst: bool) -> None:
    if rst:
        try:
            # Linger 0: close() sends RST and drops what is unsent.
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already closed by the peer's reset
    with trio.CancelScope(shield=True):
        await stream.aclose()


# -- the proxy as a process of its own, and its control channel ------------------------------


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{address!r} is not HOST:PORT")
    return host, int(port)


def handle_request(proxy: LinkProxy, request: dict[str, Any]) -> dict[str, Any]:
    """One control request against ``proxy``; the answer (errors included, never raised)."""
    try:
        op = request.get("op")
        if op == "set":
            proxy.set_faults(LinkFaults.from_json(request.get("faults", {})), str(request.get("peer", ALL_PEERS)))
        elif op == "clear":
            peer = request.get("peer")
            proxy.clear(None if peer is None else str(peer))
        elif op != "stats":
            raise ValueError(f"unknown op {op!r}: set, clear or stats")
        faults = {peer: f.to_json() for peer, f in proxy.faults().items()}
        return {"ok": True, "stats": dict(proxy.stats), "faults": faults}
    except (ValueError, TypeError) as e:
        return {"ok": False, "error": str(e)}


async def serve_control(proxy: LinkProxy, path: Path, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Answer control requests on the Unix socket ``path`` until cancelled."""
    path.unlink(missing_ok=True)
    listener = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await listener.bind(str(path))
    listener.listen(16)

    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            with trio.move_on_after(CONTROL_TIMEOUT_S):
                while not data.endswith(b"\n") and len(data) < MAX_MESSAGE:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        break
                    data += chunk
            try:
                request = json.loads(data)
                reply = handle_request(proxy, request) if isinstance(request, dict) else {"ok": False, "error": "not an object"}
            except ValueError as e:
                reply = {"ok": False, "error": f"not JSON: {e}"}
            try:
                await stream.send_all(json.dumps(reply).encode() + b"\n")
            except trio.BrokenResourceError:
                pass  # the client gave up waiting

    async with trio.open_nursery() as nursery:
        task_status.started()
        await trio.serve_listeners(answer, [trio.SocketListener(listener)], handler_nursery=nursery)


async def _main(listen: tuple[str, int], upstream: tuple[str, int], control: Path, seed: int) -> None:
    proxy = LinkProxy(upstream, seed=seed)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_control, proxy, control)
        host, port = await nursery.start(proxy.serve, *listen)
        print(f"proxy on {host}:{port} to {upstream[0]}:{upstream[1]}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="link_proxy.py", description="A TCP proxy with link faults, for tests.")
    parser.add_argument("--listen", type=_split, required=True, metavar="HOST:PORT")
    parser.add_argument("--upstream", type=_split, required=True, metavar="HOST:PORT")
    parser.add_argument("--control", type=Path, required=True, metavar="PATH", help="the control channel's Unix socket")
    parser.add_argument("--seed", type=int, default=0, help="seeds the jitter")
    args = parser.parse_args(argv)
    try:
        trio.run(_main, args.listen, args.upstream, args.control, args.seed)
    except OSError as e:
        print(f"link proxy: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
