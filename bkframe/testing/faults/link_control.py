"""Starting a link proxy process (:mod:`bkframe.testing.faults.link_proxy`) and switching its faults
from the test: :class:`LinkProxyProcess` runs one, on a simulated host
(:mod:`bkframe.testing.faults.hosts`) or not, and is its control client -- JSON requests on the
proxy's Unix socket (reached by path, so from the test's own network namespace too), each
with a timeout."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bkframe.testing.faults import link_proxy
from bkframe.testing.faults.link_proxy import ALL_PEERS, LinkFaults

if TYPE_CHECKING:  # the proxy process itself needs no pytest (hosts imports it)
    from bkframe.testing.faults.hosts import Host

#: How long a control request may take, and a proxy process to say it listens.
CONTROL_TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0


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
        """:meth:`spawn` and :meth:`wait_started`."""
        self.spawn(host)
        return self.wait_started()

    def spawn(self, host: Host | None = None) -> None:
        """Start the process, on ``host`` if given (:meth:`wait_started` waits until it listens)."""
        # Run as a script, not with -m: the proxy needs trio and attrs only, and importing the
        # bkframe package first would add a second or more to each start on a busy machine
        # (-P: the script's directory is not put first on sys.path).
        cmd = [sys.executable, "-P", link_proxy.__file__, "--listen", self.listen, "--upstream", self.upstream,
               "--control", str(self.control), "--seed", str(self.seed)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(self.log_path, "a") as log:
            if host is not None:
                self.proc = host.popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
            else:
                self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)

    def wait_started(self, timeout_s: float = START_TIMEOUT_S) -> LinkProxyProcess:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("proxy on "):
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise LinkProxyError(f"the link proxy for {self.listen} did not start in {timeout_s:.0f} s: {tail}")
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

