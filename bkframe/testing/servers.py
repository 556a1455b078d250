"""Real ZooKeeper and etcd servers for tests: free loopback ports, own data dirs.

Started as plain subprocesses from Debian's packages (``zookeeper``, ``etcd-server``),
which ``scripts/test`` installs when missing. Under ``CI=true`` a missing server fails the
tests loudly instead of skipping them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 20 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def require(what: str, ok: bool) -> None:
    if not ok:
        message = f"{what} is not installed; run ./scripts/test, which installs it (Debian packages)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


class ZooKeeperServer:
    def __init__(self, root: Path) -> None:
        require("ZooKeeper (Debian package zookeeper)", Path("/usr/share/java/zookeeper.jar").exists())
        require("java", shutil.which("java") is not None)
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={root / 'data'}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "maxClientCnxns=200\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n"
            "minSessionTimeout=1000\nmaxSessionTimeout=20000\n"
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ZooKeeperServer:
        log = open(self.root / "zk.log", "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", ZK_CLASSPATH, "-Dzookeeper.log.dir=" + str(self.root),
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.root / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # "ruok" answers before the server serves; "srvr" reports Mode: once it does.
            if "Mode:" in self._four_letters(b"srvr"):
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"ZooKeeper did not start; see {self.root / 'zk.log'}")

    def _four_letters(self, word: bytes) -> str:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(word)
                return s.recv(4096).decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.proc)


class EtcdServer:
    def __init__(self, root: Path) -> None:
        require("etcd (Debian package etcd-server)", shutil.which("etcd") is not None)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> EtcdServer:
        log = open(self.root / "etcd.log", "ab")
        client_url = f"http://127.0.0.1:{self.port}"
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        self.proc = subprocess.Popen(
            ["etcd", "--name", "test", "--data-dir", str(self.root / "data"),
             "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"test={peer_url}", "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{client_url}/health", timeout=1) as r:
                    if b'"health":"true"' in r.read():
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"etcd did not start; see {self.root / 'etcd.log'}")

    def stop(self) -> None:
        stop_process(self.proc)
