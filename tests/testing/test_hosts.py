"""Simulated hosts (bkframe.testing.faults.hosts): real network namespaces on a real bridge --
what reaches what, partitions in both modes, and nothing left behind."""

from __future__ import annotations

import ipaddress
import signal
import subprocess
import sys
import time

import pytest

from bkframe.testing.faults.hosts import STATE_DIR, TEST_RANGE, Host, Network, ip, require_netns

CONNECT = """
import socket, sys
try:
    socket.create_connection(({addr!r}, {port}), timeout={timeout}).close()
    print("connected")
except OSError as e:
    print(type(e).__name__)
"""


@pytest.fixture(autouse=True)
def _netns() -> None:
    require_netns()


def listen(host: Host, port: int = 7000) -> subprocess.Popen[bytes]:
    """A TCP server on ``host`` accepting (and closing) connections until killed."""
    proc = host.popen([sys.executable, "-c", (
        "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('0.0.0.0', {port})); s.listen(16); print('up', flush=True)\n"
        "while True:\n    c, _ = s.accept(); c.close()\n"
    )], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    return proc


def connect(src: Host, dst: Host, port: int = 7000, timeout: float = 1.0) -> str:
    return src.python(CONNECT.format(addr=dst.address, port=port, timeout=timeout)).strip()


def namespaces() -> str:
    return ip("netns", "list").stdout


def test_hosts_reach_each_other_and_the_harness_and_nothing_else() -> None:
    with Network("reach") as net:
        a, b = net.add_hosts("a", "b")
        assert net.subnet is not None and net.subnet.subnet_of(TEST_RANGE)
        assert ipaddress.ip_address(a.address) in net.subnet and a.address != b.address
        assert net.token in a.netns and net.token in net.bridge
        listen(b)
        assert connect(a, b) == "connected"
        # The harness (this process) reaches every host over the bridge.
        import socket
        socket.create_connection((b.address, 7000), timeout=2).close()
        # No default route: an address off the bridge is unreachable at once.
        assert "default" not in ip("route", "show", netns=a.netns).stdout
        assert a.python(CONNECT.format(addr="192.0.2.1", port=80, timeout=1)).strip() == "OSError"


def test_cuts_drop_or_reject_and_heal() -> None:
    with Network("cuts") as net:
        a, b, c = net.add_hosts("a", "b", "c")
        listen(b)
        net.cut(a, b)  # drop: packets vanish, the connection times out
        started = time.monotonic()
        assert connect(a, b) == "TimeoutError" and time.monotonic() - started >= 0.9
        assert connect(c, b) == "connected"  # the others are not cut
        net.heal()
        assert connect(a, b) == "connected"
        net.cut(a, b, mode="reject")  # reject: the sender is told at once
        assert connect(a, b, timeout=5) == "PermissionError"
        net.heal(a)
        assert connect(a, b) == "connected"
        net.isolate(b)
        assert connect(a, b) == "TimeoutError" and connect(c, b) == "TimeoutError"
        net.heal(b)
        assert connect(a, b) == "connected"
        net.partition([a], [b, c])
        assert connect(a, b) == "TimeoutError" and connect(a, c) == "TimeoutError" and connect(c, b) == "connected"
        net.heal()
        assert net.cuts == set() and connect(a, b) == "connected"


def test_a_one_way_cut_blocks_only_one_direction() -> None:
    """UDP shows the direction (TCP needs both ways for a handshake)."""
    receive = (
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 7001)); s.settimeout(2)\n"
        "print('up', flush=True)\ntry:\n    print(s.recv(100).decode())\nexcept OSError:\n    print('nothing')\n"
    )
    send = (
        "import socket, time\nfor _ in range(5):\n"
        "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hello', ({addr!r}, 7001)); time.sleep(0.1)\n"
    )
    with Network("oneway") as net:
        a, b = net.add_hosts("a", "b")
        net.cut(a, b, both=False)
        for src, dst, expected in ((b, a, "hello"), (a, b, "nothing")):
            server = dst.popen([sys.executable, "-c", receive], stdout=subprocess.PIPE, text=True)
            assert server.stdout is not None and server.stdout.readline().strip() == "up"
            src.python(send.format(addr=dst.address))
            assert server.stdout.readline().strip() == expected, (src, dst)
            server.wait(timeout=10)


def test_close_kills_the_hosts_processes_and_removes_everything_even_after_a_failure() -> None:
    with pytest.raises(RuntimeError, match="the test failed"):
        with Network("failing") as net:
            a = net.add_host("a")
            sleeper = a.popen(["sleep", "600"])
            bridge, ns = net.bridge, a.netns
            raise RuntimeError("the test failed")
    assert sleeper.wait(timeout=10) == -signal.SIGKILL
    assert ns not in namespaces()
    assert ip("link", "show", bridge, check=False).returncode != 0
    assert not (STATE_DIR / f"{net.token}.json").exists()


def test_a_network_left_by_a_killed_run_is_removed_by_the_next() -> None:
    script = (
        "from bkframe.testing.faults.hosts import Network\nimport time\n"
        "net = Network('abandoned'); net.add_host('x'); print(net.token, net.bridge, flush=True); time.sleep(600)\n"
    )
    orphan = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert orphan.stdout is not None
    token, bridge = orphan.stdout.readline().split()
    assert token in namespaces()
    orphan.kill()  # no cleanup ran
    orphan.wait()
    assert token in namespaces()
    with Network("next") as net:  # finds the owner gone
        assert token not in namespaces()
        assert ip("link", "show", bridge, check=False).returncode != 0
        assert net.token != token


def test_networks_at_once_get_their_own_subnets() -> None:
    with Network("one") as one, Network("two") as two:
        assert one.subnet != two.subnet and one.bridge != two.bridge
        a = one.add_host("a")
        b = two.add_host("a")  # the same host name in another network
        assert a.netns != b.netns
        # Separate bridges: a host of one network does not reach the other's.
        listen(b)
        assert connect(a, b) in ("TimeoutError", "OSError")
