"""pytest fixtures for bkframe's tests and plugin authors' (as tox ships ``tox.pytest``).

Load it from the top-level ``conftest.py`` of a test suite::

    pytest_plugins = ("bkframe.testing.pytest_plugin",)

Clusters of real bookie processes, from the cheapest to the most private:

* ``shared_cluster``: one cluster of three bookies (sqlite metadata) for the whole session,
  for tests that only write and read -- they must not stop, hang or reconfigure its bookies,
  and they use ledgers and logs of their own;
* ``module_cluster_factory``: clusters kept for one test module (the module's tests share
  what they start, e.g. a cluster with a config of their own);
* ``cluster_factory``: clusters for one test, killed at its end -- for tests that break
  bookies (kill, hang, power cut, fill the disk) or need a cluster nobody else touched.

Also ``bookie_processes`` (collects :class:`~bkframe.testing.cluster.BookieProcess` objects
to kill at the end), and session-wide real servers for metadata-store plugins:
``zk_server`` (ZooKeeper) and ``etcd_server``, and ``s3_server`` (moto's S3 server) for
tier plugins; ``small_filesystem`` mounts a real small
tmpfs or ext4 for full-disk tests. Passwords, payloads and short client
timeouts for tests are in :mod:`bkframe.testing.kit`. The contract suites are in
:mod:`bkframe.testing.metadata_contract`, :mod:`bkframe.testing.journal_contract` and
:mod:`bkframe.testing.storage_contract`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bkframe.testing.cluster import BookieProcess, Cluster, drop_reserved_space
from bkframe.testing.faults import small_fs
from bkframe.testing.faults.small_fs import SmallFilesystem
from bkframe.testing.kit import missing
from bkframe.testing.servers import EtcdServer, S3Server, ZooKeeperServer


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture(autouse=True)
def _reserved_space_dropped(request: pytest.FixtureRequest) -> Iterator[None]:
    """Once a test ends, the bookies it ran in its ``tmp_path`` give back their reserved
    space (see :func:`~bkframe.testing.cluster.drop_reserved_space`)."""
    yield
    tmp_path = request.node.funcargs.get("tmp_path") if hasattr(request.node, "funcargs") else None
    if isinstance(tmp_path, Path):
        drop_reserved_space(tmp_path)


@pytest.fixture
def bookie_processes() -> Iterator[list[BookieProcess]]:
    """Append started bookie processes; any left running is killed at the end of the test."""
    procs: list[BookieProcess] = []
    yield procs
    for b in procs:
        if b.running:
            b.kill()


class ClusterFactory:
    """Starts clusters under ``root`` and kills them all at :meth:`close`. Calling it:
    ``factory(bookies=3, metadata=None, config=None, powerloss=False, racks=())``
    (``config``: TOML text every bookie is started with; ``powerloss``: bookies can lose
    power; ``racks``: rack labels the bookies get in turn)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: list[Cluster] = []

    def __call__(
        self,
        bookies: int = 3,
        metadata: str | None = None,
        config: str | None = None,
        powerloss: bool = False,
        racks: tuple[str, ...] = (),
    ) -> Cluster:
        root = self.root / f"cluster-{len(self.made)}"
        args: tuple[str, ...] = ()
        if config is not None:
            root.mkdir(parents=True, exist_ok=True)
            (root / "bookie.toml").write_text(config)
            args = ("--config", str(root / "bookie.toml"))
        cluster = Cluster(root, bookies, metadata, bookie_args=args, powerloss=powerloss, racks=racks)
        self.made.append(cluster)
        return cluster.start(parallel=True)

    def close(self) -> None:
        for c in self.made:
            c.close()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Clusters of real bookie processes for this test only (see :class:`ClusterFactory`);
    all are killed at the end of the test."""
    factory = ClusterFactory(tmp_path)
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def module_cluster_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Cluster]]:
    """Clusters kept for the whole test module (see :class:`ClusterFactory`): a module's
    tests that need a cluster of one shape start it once. Tests sharing one must not break
    its bookies; each uses ledgers and logs of its own."""
    factory = ClusterFactory(tmp_path_factory.mktemp("module-clusters"))
    yield factory
    factory.close()


#: The shared cluster's registration TTL (the default is 6 s).
SHARED_CLUSTER_TTL_S = 60.0


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three bookies on sqlite metadata for the whole session, for tests that only write and
    read ledgers and logs of their own: never stop, hang or restart its bookies (use
    ``cluster_factory`` for that). ``shared_cluster.metadata`` is its URI."""
    root = tmp_path_factory.mktemp("shared-cluster")
    # Nobody tests failure detection on it, and a registration that expires while the
    # machine stalls (a suite at load 15-30 saw renewals 9-10 s apart) would leave a test
    # "2 registered" of 3: a long TTL keeps the bookies listed through a stall.
    (root / "bookie.toml").write_text(f"[bookie]\nregistration_ttl_s = {SHARED_CLUSTER_TTL_S}\n")
    cluster = Cluster(root / "cluster", 3, bookie_args=("--config", str(root / "bookie.toml"))).start(parallel=True)
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the whole session (tests use their own ROOT paths)."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One real etcd for the whole session (tests use their own ROOT prefixes)."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real S3-compatible server (moto's) for the whole session; each test makes its
    own bucket (``s3_server.bucket()``)."""
    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.stop()


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Callable[[str, Path, int], SmallFilesystem]]:
    """Mounts real small filesystems (:mod:`bkframe.testing.faults.small_fs`): ``mount(kind, where,
    size)`` with ``kind`` ``"tmpfs"`` or ``"ext4"``, unmounted (and the loop device freed) at
    the end of the test. A machine that cannot mount fails the test under ``CI=true`` (CI
    must run the suite as root) and skips it elsewhere."""
    mounted: list[SmallFilesystem] = []

    def mount(kind: str, where: Path, size: int) -> SmallFilesystem:
        try:
            fs = small_fs.mount(kind, where, size)
        except small_fs.CannotMountError as e:
            missing(f"cannot mount a small {kind} here ({e})", "CI must run the suite as root")
        mounted.append(fs)
        return fs

    yield mount
    for fs in mounted:
        fs.unmount()
