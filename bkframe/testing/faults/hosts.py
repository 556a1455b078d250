"""Simulated hosts for tests: network namespaces on a bridge, and partitions between them.

A :class:`Network` is a Linux bridge in the test's own (root) network namespace with an
address of its own -- the *harness*, from which the test reaches every host -- and a
:class:`Host` per simulated machine: a network namespace joined to the bridge by a veth
pair, with one address, a loopback and no default route, so nothing it sends can leave the
bridge. Processes run in a host through ``ip netns exec`` (:meth:`Host.popen`), and see only
that host's interfaces: a bookie bound to 0.0.0.0 there advertises the host's address.

Partitions (no ``netem`` on this kernel, so no iptables either):

* :meth:`Network.cut` -- ``a`` can no longer reach ``b`` (and, ``both=True``, ``b`` not ``a``).
  ``mode="drop"`` (the default, as a real partition) pins ``b``'s address in ``a``'s neighbour
  table to a MAC nobody has: packets leave and vanish, connections time out.
  ``mode="reject"`` adds a ``prohibit`` route: the sender gets an error at once.
* :meth:`Network.isolate` -- takes the host's link down: cut from every host and the harness.
* :meth:`Network.heal` -- undoes the cuts and isolations (of one host, or all).

Addresses come from 198.18.0.0/15 (RFC 2544, reserved for test networks): one /24 per
network, chosen under a file lock among those no interface of this machine uses, so parallel
runs never collide; names carry a run token. The bridge is verified (every host reaches the
harness over TCP) before :meth:`Network.add_host` returns. :meth:`Network.close` -- also on a
failed test, through the ``network`` fixture or ``with Network(...)`` -- kills the processes
started in the hosts and removes the namespaces, links and bridge; a network left by a
killed test run is removed by the next run that finds its owner gone.

Needs root (CAP_NET_ADMIN) and iproute2's ``ip``; :func:`require_netns` fails the test
under ``CI=true`` if either is missing, and skips it otherwise.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bkframe.testing.kit import missing

#: RFC 2544's range for test networks: never routed on the internet.
TEST_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
#: Where networks record themselves, so a later run can remove one whose owner died.
STATE_DIR = Path("/run/bkframe-test-networks") if os.access("/run", os.W_OK) else Path("/tmp/bkframe-test-networks")
#: A MAC address no interface has (locally administered): where a cut host's packets go.
NOWHERE_MAC = "02:00:5e:00:53:00"
#: Seconds a setup command may take.
IP_TIMEOUT_S = 30.0


class NetworkError(RuntimeError):
    """Setting up or changing the simulated network failed; the message has the command."""


def ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", *(("-n", netns) if netns else ()), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if check and proc.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def netns_available() -> str | None:
    """None if network namespaces can be made here, else why not."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (Debian package iproute2; ./scripts/test installs it)"
    if os.geteuid() != 0:
        return "simulated hosts need root (CAP_NET_ADMIN) to make network namespaces and bridges"
    probe = f"bkf-probe-{os.getpid()}-{secrets.token_hex(3)}"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed here: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def require_netns() -> None:
    """Fail (under ``CI=true``) or skip the test when simulated hosts cannot be made here."""
    why = netns_available()
    if why is not None:
        missing(why, "run the suite as root, with iproute2 (scripts/test installs it)")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _state_lock() -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def remove_abandoned() -> list[str]:
    """Remove the networks of test runs that are gone (killed before they could clean up);
    returns their tokens. Call with the state lock held."""
    removed = []
    for record in STATE_DIR.glob("*.json"):
        try:
            state = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if _pid_alive(int(state["pid"])):
            continue
        for ns in state.get("namespaces", []):
            ip("netns", "del", ns, check=False)
        ip("link", "del", state["bridge"], check=False)
        record.unlink(missing_ok=True)
        removed.append(state["token"])
    return removed


def _used_subnets() -> set[ipaddress.IPv4Network]:
    out = ip("-4", "-o", "addr", "show").stdout
    used = set()
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            used.add(ipaddress.IPv4Interface(parts[parts.index("inet") + 1]).network)
    return used


class Host:
    """One simulated machine: a network namespace with one address on the network's bridge."""

    def __init__(self, network: Network, name: str, netns: str, address: str, veth: str) -> None:
        self.network = network
        self.name = name
        self.netns = netns
        self.address = address
        #: The veth end in the root namespace (on the bridge).
        self.veth = veth
        self.processes: list[subprocess.Popen[Any]] = []

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address})"

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` run in this host (``ip netns exec`` execs them: the pid is theirs)."""
        return ["ip", "netns", "exec", self.netns, *args]

    def popen(self, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``args`` in this host; killed by :meth:`Network.close` if still running."""
        proc = subprocess.Popen(self.command(args), **kwargs)
        self.processes.append(proc)
        return proc

    def run(self, args: Sequence[str], *, timeout: float = 120.0, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.command(args), timeout=timeout, **kwargs)

    def python(self, code: str, *, timeout: float = 120.0) -> str:
        """Run Python code in this host; its stdout (raises if it fails)."""
        proc = self.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise NetworkError(f"python in host {self.name} failed: {proc.stderr.strip()[-2000:]}")
        return str(proc.stdout)

    def kill_all(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                except ProcessLookupError:
                    pass
        for proc in self.processes:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


class Network:
    """A bridge and the hosts on it, for one test (or one module); see the module docstring."""

    def __init__(self, label: str = "net") -> None:
        self.token = secrets.token_hex(3)
        self.label = label
        self.bridge = f"bkb{self.token}"
        self.hosts: dict[str, Host] = {}
        self.subnet: ipaddress.IPv4Network | None = None
        self.harness_address = ""
        self._cuts: set[tuple[str, str, str]] = set()
        self._isolated: set[str] = set()
        self._closed = False
        self._guard = threading.Lock()
        with _state_lock():
            remove_abandoned()
            used = _used_subnets()
            candidates = [s for s in TEST_RANGE.subnets(new_prefix=24) if not any(s.overlaps(u) for u in used)]
            if not candidates:
                raise NetworkError("every /24 of 198.18.0.0/15 is in use on this machine")
            self.subnet = random.choice(candidates)
            self.harness_address = str(self.subnet[1])
            self._record()
            try:
                ip("link", "add", self.bridge, "type", "bridge")
                ip("addr", "add", f"{self.harness_address}/24", "dev", self.bridge)
                ip("link", "set", self.bridge, "up")
            except BaseException:
                self.close()
                raise

    # -- bookkeeping -------------------------------------------------------------------

    def _record(self) -> None:
        state = {
            "pid": os.getpid(), "token": self.token, "bridge": self.bridge, "label": self.label,
            "namespaces": [h.netns for h in self.hosts.values()],
        }
        (STATE_DIR / f"{self.token}.json").write_text(json.dumps(state))

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hosts -------------------------------------------------------------------------

    def add_host(self, name: str) -> Host:
        """A new host named ``name`` with the next address of the network's /24; verified
        (it reaches the harness over TCP) before it is returned."""
        assert self.subnet is not None
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists already")
        index = len(self.hosts) + 2
        if index > 254:
            raise NetworkError("a network holds at most 253 hosts")
        netns = f"bkf-{self.token}-{name}"
        veth = f"bkv{self.token}{index:03d}"
        address = str(self.subnet[index])
        host = Host(self, name, netns, address, veth)
        with _state_lock():
            self.hosts[name] = host
            self._record()
        ip("netns", "add", netns)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("addr", "add", f"{address}/24", "dev", "eth0", netns=netns)
        ip("link", "set", "eth0", "up", netns=netns)
        ip("link", "set", "lo", "up", netns=netns)
        self.verify(host)
        return host

    def add_hosts(self, *names: str) -> list[Host]:
        return [self.add_host(n) for n in names]

    def host(self, name: str | Host) -> Host:
        return name if isinstance(name, Host) else self.hosts[name]

    def verify(self, host: Host, timeout_s: float = 10.0) -> None:
        """Check that ``host`` reaches the harness over the bridge (a TCP connection from
        inside the namespace), and that it has no route off the bridge."""
        routes = ip("route", "show", netns=host.netns).stdout
        if "default" in routes:
            raise NetworkError(f"host {host.name} has a default route; simulated hosts must not: {routes}")
        with socket.socket() as listener:
            listener.bind((self.harness_address, 0))
            listener.listen(1)
            listener.settimeout(timeout_s)
            port = listener.getsockname()[1]
            proc = host.popen(
                [sys.executable, "-S", "-c",
                 f"import socket; socket.create_connection(({self.harness_address!r}, {port}), timeout={timeout_s})"],
                stderr=subprocess.PIPE,
            )
            try:
                conn, (peer, _) = listener.accept()
                conn.close()
            except TimeoutError:
                raise NetworkError(f"host {host.name} ({host.address}) cannot reach the harness over {self.bridge}") from None
            finally:
                proc.wait(timeout=timeout_s)
            if peer != host.address:
                raise NetworkError(f"host {host.name} reached the harness from {peer}, not its address {host.address}")

    # -- partitions --------------------------------------------------------------------

    def cut(self, a: str | Host, b: str | Host, *, both: bool = True, mode: str = "drop") -> None:
        """``a`` can no longer reach ``b`` (nor ``b`` ``a`` with ``both``); see the module docstring."""
        a, b = self.host(a), self.host(b)
        pairs = [(a, b), (b, a)] if both else [(a, b)]
        with self._guard:
            for src, dst in pairs:
                self._block(src, dst, mode)

    def _block(self, src: Host, dst: Host, mode: str) -> None:
        if mode == "drop":
            ip("neigh", "replace", dst.address, "lladdr", NOWHERE_MAC, "nud", "permanent", "dev", "eth0", netns=src.netns)
        elif mode == "reject":
            ip("route", "replace", "prohibit", f"{dst.address}/32", netns=src.netns)
        else:
            raise ValueError(f"mode {mode!r}: 'drop' (packets vanish) or 'reject' (the sender gets an error)")
        self._cuts.add((src.name, dst.name, mode))

    def partition(self, *groups: Sequence[str | Host], mode: str = "drop") -> None:
        """Cut every host of each group from every host of the other groups."""
        named = [[self.host(h) for h in g] for g in groups]
        for i, group in enumerate(named):
            for other in named[i + 1 :]:
                for a in group:
                    for b in other:
                        self.cut(a, b, mode=mode)

    def isolate(self, a: str | Host) -> None:
        """Take the host's link down: it reaches nobody, nobody reaches it."""
        host = self.host(a)
        with self._guard:
            ip("link", "set", host.veth, "down")
            self._isolated.add(host.name)

    def heal(self, a: str | Host | None = None, b: str | Host | None = None) -> None:
        """Undo every cut and isolation involving ``a`` (all of them without ``a``); with
        ``b`` too, only the cuts between ``a`` and ``b``."""
        only = None if a is None else self.host(a).name
        pair = None if b is None else {only, self.host(b).name}
        with self._guard:
            for src, dst, mode in sorted(self._cuts):
                if only is not None and only not in (src, dst):
                    continue
                if pair is not None and {src, dst} != pair:
                    continue
                s = self.hosts[src]
                target = self.hosts[dst].address
                if mode == "drop":
                    ip("neigh", "del", target, "dev", "eth0", netns=s.netns, check=False)
                else:
                    ip("route", "del", "prohibit", f"{target}/32", netns=s.netns, check=False)
                self._cuts.discard((src, dst, mode))
            for name in sorted(self._isolated):
                if pair is None and (only is None or only == name):
                    ip("link", "set", self.hosts[name].veth, "up")
                    self._isolated.discard(name)

    @property
    def cuts(self) -> set[tuple[str, str, str]]:
        """(from, to, mode) of each cut in place."""
        return set(self._cuts)

    # -- teardown ----------------------------------------------------------------------

    def close(self) -> None:
        """Kill the hosts' processes, remove the namespaces, their links and the bridge."""
        if self._closed:
            return
        self._closed = True
        for host in self.hosts.values():
            host.kill_all()
        for host in self.hosts.values():
            ip("netns", "del", host.netns, check=False)
        ip("link", "del", self.bridge, check=False)
        with _state_lock():
            (STATE_DIR / f"{self.token}.json").unlink(missing_ok=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.bridge in ip("-o", "link", "show", check=False).stdout:
            time.sleep(0.05)
