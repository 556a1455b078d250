"""A :class:`~bkframe.testing.link_proxy.LinkProxy` as a process of its own, switched from the test.

``python -m bkframe.testing.link_control --listen HOST:PORT --upstream HOST:PORT --control PATH``
serves the proxy and, on the Unix socket ``PATH``, a control channel of JSON lines, one
request and one answer per connection:

* ``{"op": "set", "peer": "*", "faults": {"latency_s": 0.05, ...}}`` -- the link's faults
  (:class:`~bkframe.testing.link_proxy.LinkFaults` fields; omitted ones are off);
* ``{"op": "clear"}`` (every link) or ``{"op": "clear", "peer": ADDRESS}``;
* ``{"op": "stats"}`` -- counters (bytes forwarded each way, connections, resets, tears,
  bytes swallowed) and the faults in force.

Answers are ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. A Unix socket is
reached by path, so a proxy in a simulated host's network namespace
(:mod:`bkframe.testing.hosts`) is controlled from the test's own namespace.
:class:`LinkProxyProcess` starts one (on a host or not) and is its control client; every
request has a timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from bkframe.testing.link_proxy import ALL_PEERS, LinkFaults, LinkProxy

if TYPE_CHECKING:  # the proxy process itself needs no pytest (hosts imports it)
    from bkframe.testing.hosts import Host

#: How long a control request may take, and a proxy process to say it listens.
CONTROL_TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
#: The largest control request or answer.
MAX_MESSAGE = 1 << 20


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
    parser = argparse.ArgumentParser(prog="python -m bkframe.testing.link_control", description=__doc__.split("\n")[0])
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


class LinkProxyError(RuntimeError):
    """A proxy process did not start, or refused or did not answer a control request."""


class LinkProxyProcess:
    """A proxy process: ``LinkProxyProcess(listen, upstream, control, log).start(host)``;
    :meth:`set_faults`, :meth:`clear` and :meth:`stats` switch and read it. On a simulated
    host it is killed with the host's other processes (:meth:`Network.close`) if not before."""

    def __init__(self, listen: str, upstream: str, control: Path, log_path: Path, *, seed: int = 0) -> None:
        self.listen, self.upstream, self.control, self.log_path, self.seed = listen, upstream, control, log_path, seed
        self.proc: subprocess.Popen[str] | None = None
        #: Where it listens (known once started).
        self.address = ""

    def start(self, host: Host | None = None) -> LinkProxyProcess:
        cmd = [sys.executable, "-m", "bkframe.testing.link_control", "--listen", self.listen, "--upstream",
               self.upstream, "--control", str(self.control), "--seed", str(self.seed)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(self.log_path, "a") as log:
            if host is not None:
                self.proc = host.popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
            else:
                self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("proxy on "):
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise LinkProxyError(f"the link proxy for {self.listen} did not start in {START_TIMEOUT_S:.0f} s: {tail}")
        self.address = line.split()[2]
        return self

    def request(self, request: dict[str, Any], timeout_s: float = CONTROL_TIMEOUT_S) -> dict[str, Any]:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout_s)
                s.connect(str(self.control))
                s.sendall(json.dumps(request).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError as e:
            raise LinkProxyError(f"the link proxy for {self.listen} did not answer {request}: {e}") from e
        try:
            reply: dict[str, Any] = json.loads(data)
        except ValueError:
            raise LinkProxyError(f"the link proxy for {self.listen} answered {request} with {data[:200]!r}") from None
        if not reply.get("ok"):
            raise LinkProxyError(f"the link proxy for {self.listen} refused {request}: {reply.get('error')}")
        return reply

    def set_faults(self, faults: LinkFaults, peer: str = ALL_PEERS) -> None:
        self.request({"op": "set", "peer": peer, "faults": faults.to_json()})

    def clear(self, peer: str | None = None) -> None:
        self.request({"op": "clear", **({} if peer is None else {"peer": peer})})

    def stats(self) -> dict[str, int]:
        return dict(self.request({"op": "stats"})["stats"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
