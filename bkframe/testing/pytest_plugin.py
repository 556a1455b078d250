"""pytest fixtures for bkframe's tests and plugin authors' (as tox ships ``tox.pytest``).

Load it from the top-level ``conftest.py`` of a test suite::

    pytest_plugins = ("bkframe.testing.pytest_plugin",)

Fixtures: ``cluster_factory`` (clusters of real bookie processes, killed at the end of the
test), ``bookie_processes`` (collects :class:`~bkframe.testing.cluster.BookieProcess` objects
to kill at the end), and session-wide real servers for metadata-store plugins:
``zk_server`` (ZooKeeper) and ``etcd_server``. The contract suites are in
:mod:`bkframe.testing.metadata_contract`, :mod:`bkframe.testing.journal_contract` and
:mod:`bkframe.testing.storage_contract`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bkframe.testing.cluster import BookieProcess, Cluster
from bkframe.testing.servers import EtcdServer, ZooKeeperServer


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture
def bookie_processes() -> Iterator[list[BookieProcess]]:
    """Append started bookie processes; any left running is killed at the end of the test."""
    procs: list[BookieProcess] = []
    yield procs
    for b in procs:
        if b.running:
            b.kill()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """``cluster_factory(bookies=3, metadata=None, config=None, powerloss=False, racks=())``
    starts a cluster of real bookie processes (``config``: TOML text every bookie is started
    with; ``powerloss``: bookies can lose power; ``racks``: rack labels the bookies get in
    turn); all are killed at the end of the test."""
    made: list[Cluster] = []

    def make(
        bookies: int = 3,
        metadata: str | None = None,
        config: str | None = None,
        powerloss: bool = False,
        racks: tuple[str, ...] = (),
    ) -> Cluster:
        root = tmp_path / f"cluster-{len(made)}"
        args: tuple[str, ...] = ()
        if config is not None:
            root.mkdir(parents=True, exist_ok=True)
            (root / "bookie.toml").write_text(config)
            args = ("--config", str(root / "bookie.toml"))
        cluster = Cluster(root, bookies, metadata, bookie_args=args, powerloss=powerloss, racks=racks)
        made.append(cluster)
        return cluster.start()

    yield make
    for c in made:
        c.close()


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
