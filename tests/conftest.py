"""Shared fixtures: bookies on port 0 in temp dirs, in-process or as subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from bkframe.core.bookie.service import BookieService
from bkframe.core.config import Config, load_config
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.replication.data_integrity import LimboRepair

#: The fault suite's command-line options (--fault-seeds ...), registered at startup so they
#: work from the repo root too.
pytest_plugins = ("tests.faults.options",)


def make_config(data_dir: Path, **bookie: Any) -> Config:
    return load_config(None, {"data_dir": data_dir, "port": 0, **bookie})


@asynccontextmanager
async def running_bookie(config: Config, plugins: PluginManager | None = None) -> AsyncIterator[tuple[BookieService, str, int]]:
    """An in-process bookie for the duration of the block, stopped cleanly after it."""
    service = BookieService(config, plugins or PluginManager(load_entry_points=True), repair=LimboRepair)
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(service.run)
        try:
            yield service, host, port
        finally:
            service.stop()


class BookieProcess:
    """``bkframe bookie`` run as a real subprocess on port 0."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        # The log goes to a file: a pipe nobody reads fills up and blocks the bookie.
        self.log_path = data_dir.with_name(data_dir.name + ".log")
        with open(self.log_path, "a") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bkframe", "bookie", "--data-dir", str(data_dir), "--port", "0", *extra],
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.wait(timeout=30)
            raise RuntimeError(f"bookie did not start: stdout {line!r} stderr {self.log_path.read_text()[-3000:]!r}")
        host, _, port = line.split()[-1].rpartition(":")
        self.host, self.port = host, int(port)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


@pytest.fixture
def bookie_processes() -> Iterator[list[BookieProcess]]:
    """Collects started bookie processes and kills any left running at the end."""
    procs: list[BookieProcess] = []
    yield procs
    for b in procs:
        if b.proc.poll() is None:
            b.kill()


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Any]:
    """Makes clusters of real bookie processes; kills them all at the end of the test."""
    from tests.cluster import Cluster

    made: list[Cluster] = []

    def make(bookies: int = 3, metadata: str | None = None, config: str | None = None, powerloss: bool = False) -> Cluster:
        """``config``: TOML text every bookie is started with; ``powerloss``: bookies can lose power."""
        root = tmp_path / f"cluster-{len(made)}"
        args: tuple[str, ...] = ()
        if config is not None:
            root.mkdir(parents=True, exist_ok=True)
            (root / "bookie.toml").write_text(config)
            args = ("--config", str(root / "bookie.toml"))
        cluster = Cluster(root, bookies, metadata, bookie_args=args, powerloss=powerloss).start()
        made.append(cluster)
        return cluster

    yield make
    for c in made:
        c.close()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real ZooKeeper for the whole session (tests use their own ROOT paths)."""
    from tests.servers import ZooKeeperServer

    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real etcd for the whole session (tests use their own ROOT prefixes)."""
    from tests.servers import EtcdServer

    server = EtcdServer(tmp_path_factory.mktemp("etcd")).start()
    yield server
    server.stop()
