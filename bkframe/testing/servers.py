"""Real ZooKeeper, etcd and S3 servers for tests: single servers on free loopback ports, and
three-member ensembles with each member on a simulated host of its own
(:mod:`bkframe.testing.faults.hosts`); own data dirs.

Started as plain subprocesses: ZooKeeper and etcd from Debian's packages (``zookeeper``,
``etcd-server``), which ``scripts/test`` installs when missing; the S3 server is moto's
(PyPI ``moto``, a dev dependency: docs/tiered-storage.md says why). Under ``CI=true`` a
missing server fails the tests loudly instead of skipping them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, Generic, Self, TypeVar

from bkframe.testing.faults.hosts import Host
from bkframe.testing.kit import missing

ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
#: JVM options of the test servers: they live minutes and share the machine with the suite,
#: so the quick compiler only (C2's work never pays back) and the serial collector.
TEST_JVM_OPTIONS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


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


def wait_for_http(
    proc: subprocess.Popen[bytes], url: str, marker: bytes, *, what: str, log: Path, timeout_s: float = 60
) -> None:
    """Wait until a GET of ``url`` answers with ``marker`` in its body; RuntimeError pointing
    at ``log`` if ``proc`` exits first or ``timeout_s`` pass."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if marker in r.read():
                    return
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not start; see {log}")


def require(what: str, ok: bool) -> None:
    if not ok:
        missing(f"{what} is not installed", "run ./scripts/test, which installs it (Debian packages)")


class _ServerProcess:
    """A server process of the tests, its files and its output (``log_name``) under ``root``."""

    log_name: ClassVar[str]

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.root / self.log_name

    def _spawn(
        self, argv: list[str], popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen
    ) -> subprocess.Popen[bytes]:
        """Start it (``popen``: a simulated host's, to start it there), its output to the log."""
        with open(self.log, "ab") as log:
            self.proc = popen(argv, stdout=log, stderr=subprocess.STDOUT)
        return self.proc

    def stop(self) -> None:
        stop_process(self.proc)


class _LocalServer(_ServerProcess):
    """A server process on a free loopback port."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.port = free_port()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


class ZooKeeperServer(_LocalServer):
    log_name = "zk.log"

    def __init__(self, root: Path, *, jvm_options: Sequence[str] = TEST_JVM_OPTIONS) -> None:
        """``jvm_options``: the test servers' by default; a benchmark holding 10^6 ledgers
        needs a larger heap."""
        require("ZooKeeper (Debian package zookeeper)", Path("/usr/share/java/zookeeper.jar").exists())
        require("java", shutil.which("java") is not None)
        super().__init__(root)
        self.jvm_options = tuple(jvm_options)
        (root / "data").mkdir(exist_ok=True)
        (root / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={root / 'data'}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "maxClientCnxns=200\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n"
            "minSessionTimeout=1000\nmaxSessionTimeout=20000\n"
        )

    def start(self) -> ZooKeeperServer:
        proc = self._spawn(
            ["java", *self.jvm_options, "-cp", ZK_CLASSPATH, "-Dzookeeper.log.dir=" + str(self.root),
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.root / "zoo.cfg")],
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # "ruok" answers before the server serves; "srvr" reports Mode: once it does.
            if "Mode:" in _four_letters_at("127.0.0.1", self.port, b"srvr"):
                return self
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"ZooKeeper did not start; see {self.log}")


#: etcd keeps a revision of every write and compacts nothing unless told: bkframe rewrites a
#: log record at each rollover, so test servers (and docs/deployment.md) compact by revision.
ETCD_COMPACTION = ("--auto-compaction-mode", "revision", "--auto-compaction-retention", "1000")


class EtcdServer(_LocalServer):
    log_name = "etcd.log"

    def __init__(self, root: Path, *, quota_backend_bytes: int | None = None) -> None:
        """``quota_backend_bytes``: etcd's space quota (default etcd's 2 GiB), to test a full store."""
        require("etcd (Debian package etcd-server)", shutil.which("etcd") is not None)
        super().__init__(root)
        self.quota_backend_bytes = quota_backend_bytes
        self.peer_port = free_port()

    def start(self) -> EtcdServer:
        client_url = f"http://127.0.0.1:{self.port}"
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        proc = self._spawn(
            ["etcd", "--name", "test", "--data-dir", str(self.root / "data"),
             "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"test={peer_url}", "--log-level", "warn", *ETCD_COMPACTION,
             *(() if self.quota_backend_bytes is None else ("--quota-backend-bytes", str(self.quota_backend_bytes)))],
        )
        wait_for_http(proc, f"{client_url}/health", b'"health":"true"', what="etcd", log=self.log)
        return self


class S3Server(_LocalServer):
    """moto's S3 server (``python -m moto.server``), in memory, on a free loopback port.
    It takes any access key and secret; :meth:`bucket` makes a fresh bucket per test."""

    #: Keys the tests sign with (moto checks no signature by default).
    ACCESS_KEY_ID, SECRET_ACCESS_KEY = "bkframe-test-key", "bkframe-test-secret"
    log_name = "s3.log"

    def __init__(self, root: Path) -> None:
        require("moto's S3 server (PyPI moto[s3], flask: the dev dependencies)",
                importlib.util.find_spec("moto") is not None and importlib.util.find_spec("flask") is not None)
        super().__init__(root)

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}"

    def start(self) -> S3Server:
        proc = self._spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)])
        # ListBuckets: answered once the server serves S3.
        wait_for_http(proc, f"{self.endpoint}/", b"ListAllMyBucketsResult", what="the S3 server", log=self.log)
        return self

    def bucket(self) -> str:
        """A new, empty bucket's name (S3's CreateBucket: a PUT of ``/NAME``)."""
        name = f"t-{uuid.uuid4().hex[:20]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        return name

    def credentials_file(self, path: Path) -> Path:
        """An AWS credentials file with the test keys, for ``credentials=FILE``."""
        path.write_text(
            f"[default]\naws_access_key_id = {self.ACCESS_KEY_ID}\naws_secret_access_key = {self.SECRET_ACCESS_KEY}\n"
        )
        return path


# -- ensembles on simulated hosts -----------------------------------------------------------

#: Ports of a member on its own host (each host has its own network namespace).
ZK_CLIENT_PORT, ZK_PEER_PORT, ZK_ELECTION_PORT = 2181, 2888, 3888
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380
#: How long an ensemble may take to elect a leader and serve.
ENSEMBLE_START_TIMEOUT_S = 90.0


M = TypeVar("M", "ZooKeeperMember", "EtcdMember")


def _four_letters_at(address: str, port: int, word: bytes, timeout_s: float = 1.0) -> str:
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as s:
            s.sendall(word)
            return s.recv(4096).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperMember(_ServerProcess):
    """One member of a :class:`ZooKeeperEnsemble`, on its own host."""

    log_name = "zk.log"

    def __init__(self, root: Path, host: Host, myid: int, servers: str) -> None:
        super().__init__(root)
        self.host, self.myid = host, myid
        (root / "data").mkdir(exist_ok=True)
        (root / "data" / "myid").write_text(f"{myid}\n")
        (root / "zoo.cfg").write_text(
            f"tickTime=500\ninitLimit=20\nsyncLimit=4\ndataDir={root / 'data'}\n"
            f"clientPort={ZK_CLIENT_PORT}\nclientPortAddress={host.address}\n"
            "maxClientCnxns=200\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n"
            "minSessionTimeout=1000\nmaxSessionTimeout=20000\n" + servers
        )

    @property
    def address(self) -> str:
        return f"{self.host.address}:{ZK_CLIENT_PORT}"

    def start(self) -> None:
        self._spawn(
            ["java", *TEST_JVM_OPTIONS, "-cp", ZK_CLASSPATH, "-Dzookeeper.log.dir=" + str(self.root),
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.root / "zoo.cfg")],
            self.host.popen,
        )

    def mode(self) -> str:
        """"leader", "follower", "standalone" (a one-member ensemble) or "" (not serving: no
        quorum, or not reachable)."""
        for line in _four_letters_at(self.host.address, ZK_CLIENT_PORT, b"srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""


class _Ensemble(Generic[M]):
    """Servers forming one ensemble, each on its own host; ``connect`` is the ``HOST:PORT,...``
    list a URI of the store takes."""

    members: list[M]

    @property
    def connect(self) -> str:
        return ",".join(m.address for m in self.members)

    def start(self) -> Self:
        for m in self.members:
            m.start()
        self._wait_serving()
        return self

    def _wait_serving(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        for m in self.members:
            m.stop()


class ZooKeeperEnsemble(_Ensemble[ZooKeeperMember]):
    """Three (or more) ZooKeeper servers forming one ensemble, each on its own host
    (``zk://`` URIs)."""

    def __init__(self, root: Path, hosts: Sequence[Host]) -> None:
        require("ZooKeeper (Debian package zookeeper)", Path("/usr/share/java/zookeeper.jar").exists())
        require("java", shutil.which("java") is not None)
        servers = "".join(
            f"server.{i}={h.address}:{ZK_PEER_PORT}:{ZK_ELECTION_PORT}\n" for i, h in enumerate(hosts, 1)
        )
        self.members = [ZooKeeperMember(root / f"zk-{h.name}", h, i, servers) for i, h in enumerate(hosts, 1)]

    def _wait_serving(self) -> None:
        self.wait_serving(len(self.members))

    def wait_serving(self, count: int, timeout_s: float = ENSEMBLE_START_TIMEOUT_S) -> None:
        """Wait until ``count`` members serve (one of them the leader)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            modes = [m.mode() for m in self.members]
            # One member alone runs "standalone": its own leader.
            if sum(1 for x in modes if x in ("leader", "follower", "standalone")) >= count and (
                "leader" in modes or "standalone" in modes
            ):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the ZooKeeper ensemble did not serve with {count} members; logs in {self.members[0].root.parent}")

    def leader(self) -> ZooKeeperMember:
        for m in self.members:
            if m.mode() == "leader":
                return m
        raise RuntimeError("the ZooKeeper ensemble has no leader now")


class EtcdMember(_ServerProcess):
    """One member of an :class:`EtcdCluster`, on its own host."""

    log_name = "etcd.log"

    def __init__(self, root: Path, host: Host, initial_cluster: str, token: str) -> None:
        super().__init__(root)
        self.host = host
        self.name = f"m-{host.name}"
        self.initial_cluster, self.token = initial_cluster, token

    @property
    def address(self) -> str:
        return f"{self.host.address}:{ETCD_CLIENT_PORT}"

    def start(self) -> None:
        client_url = f"http://{self.host.address}:{ETCD_CLIENT_PORT}"
        peer_url = f"http://{self.host.address}:{ETCD_PEER_PORT}"
        self._spawn(
            ["etcd", "--name", self.name, "--data-dir", str(self.root / "data"),
             "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", self.initial_cluster, "--initial-cluster-token", self.token,
             "--initial-cluster-state", "new", "--heartbeat-interval", "100", "--election-timeout", "1000",
             "--log-level", "warn", *ETCD_COMPACTION],
            self.host.popen,
        )

    def status(self) -> dict[str, str]:
        """This member's view: its ``member_id`` and the ``leader`` it follows ({} if it does not answer)."""
        request = urllib.request.Request(
            f"http://{self.address}/v3/maintenance/status", data=b"{}", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=1) as r:
                body = json.loads(r.read())
        except (OSError, ValueError):
            return {}
        return {"member_id": str(body.get("header", {}).get("member_id", "")), "leader": str(body.get("leader", ""))}

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/health", timeout=1) as r:
                return b'"health":"true"' in r.read()
        except OSError:
            return False


class EtcdCluster(_Ensemble[EtcdMember]):
    """Three (or more) etcd members forming one cluster, each on its own host (``etcd://`` URIs)."""

    def __init__(self, root: Path, hosts: Sequence[Host]) -> None:
        require("etcd (Debian package etcd-server)", shutil.which("etcd") is not None)
        initial = ",".join(f"m-{h.name}=http://{h.address}:{ETCD_PEER_PORT}" for h in hosts)
        token = f"bkframe-{root.name}-{os.getpid()}"
        self.members = [EtcdMember(root / f"etcd-{h.name}", h, initial, token) for h in hosts]

    def _wait_serving(self) -> None:
        deadline = time.monotonic() + ENSEMBLE_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if all(m.healthy() for m in self.members):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the etcd cluster did not become healthy; logs in {self.members[0].root.parent}")

    def leader(self) -> EtcdMember:
        for m in self.members:
            st = m.status()
            if st and st["member_id"] == st["leader"]:
                return m
        raise RuntimeError("the etcd cluster has no leader now")

    def move_leader(self, to: EtcdMember, timeout_s: float = 30.0) -> None:
        """Make ``to`` the leader (etcd's MoveLeader, asked of the current leader)."""
        deadline = time.monotonic() + timeout_s
        while (leader := self.leader()) is not to:
            target = to.status().get("member_id", "")
            request = urllib.request.Request(
                f"http://{leader.address}/v3/maintenance/transfer-leadership",
                data=json.dumps({"targetID": target}).encode(), headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=5):
                    pass
            except OSError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd did not move its leader to {to.name}: {e}") from e
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not move its leader to {to.name} in {timeout_s} s")
            time.sleep(0.2)

