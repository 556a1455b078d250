"""Bookies for tests: the process launcher of :mod:`bkframe.launcher` with the test
fault layers, and an in-process bookie for the length of an ``async with``.

By default a :class:`BookieProcess` here runs the *test* entry point
(``python -m bkframe.testing.faults.bookie``), which installs the fault layers a test asks for
through the environment -- a power-loss layer (``powerloss=True``, then :meth:`lose_power`),
a disk of limited size (``disk_capacity=``, then :meth:`set_disk_capacity`) and injected
write failures (``$BKFRAME_WRITE_FAULTS``); ``command=BOOKIE_COMMAND`` runs the real command.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Self

import trio

from bkframe import launcher
from bkframe.bookie.runtime.space_reserve import RESERVE_FILE
from bkframe.bookie.service import BookieService
from bkframe.cli.bookie import compose_bookie
from bkframe.core.config import Config, load_config
from bkframe.core.plugin_manager import PluginManager
from bkframe.launcher import BOOKIE_COMMAND, START_TIMEOUT_S, BookieStartError
from bkframe.testing.faults.filling_disk import set_capacity
from bkframe.testing.faults.hosts import Host
from bkframe.testing.faults.link_control import LinkProxyProcess
from bkframe.testing.faults.powerloss import lose_power

#: Where a proxied bookie listens (its host's loopback) and its link proxy (the host's address).
PROXIED_PORT = 3181
#: ``bkframe bookie`` with the fault layers the environment asks for installed first.
TEST_BOOKIE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "bkframe.testing.faults.bookie")

__all__ = [
    "BOOKIE_COMMAND",
    "PROXIED_PORT",
    "START_TIMEOUT_S",
    "TEST_BOOKIE_COMMAND",
    "BookieProcess",
    "BookieStartError",
    "Cluster",
    "HostedCluster",
    "drop_reserved_space",
    "make_config",
    "running_bookie",
]


def make_config(data_dir: Path, **bookie: Any) -> Config:
    """A bookie config with defaults, on port 0, with ``[bookie]`` overrides."""
    return load_config(None, {"data_dir": data_dir, "port": 0, **bookie})


@asynccontextmanager
async def running_bookie(config: Config, plugins: PluginManager | None = None) -> AsyncIterator[tuple[BookieService, str, int]]:
    """An in-process bookie for the duration of the block, stopped cleanly after it; it makes
    its metadata store a cluster if it is none (as ``--init-cluster``)."""
    service = compose_bookie(config, plugins or PluginManager(), init_cluster=True)
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(service.run)
        try:
            yield service, host, port
        finally:
            service.stop()


class BookieProcess(launcher.BookieProcess):
    """One bookie process: ``BookieProcess(data_dir, metadata=uri).start()``, by default
    through the test entry point (see the module's docstring) and with ``--init-cluster``
    (a test's fresh metadata store becomes a cluster; ``init_cluster=False`` to test a
    bookie on a store that is none)."""

    def __init__(
        self, data_dir: Path, *, command: Sequence[str] = TEST_BOOKIE_COMMAND, init_cluster: bool = True, **options: Any
    ) -> None:
        super().__init__(data_dir, command=command, init_cluster=init_cluster, **options)
        #: With ``powerloss=True``: what the bookie has fsynced (see bkframe.testing.faults.powerloss).
        self.shadow = data_dir.with_name(data_dir.name + "-synced")
        #: With ``disk_capacity=``: the file holding the size of the simulated disk.
        self.capacity_file = data_dir.with_name(data_dir.name + "-capacity")

    def spawn(
        self,
        *extra: str,
        powerloss: bool = False,
        disk_capacity: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Start the process (see :meth:`wait_started`).

        ``powerloss``: record what is fsynced, so that :meth:`lose_power` can drop the rest.
        ``disk_capacity``: the data dir behaves as a disk of this many bytes;
        :meth:`set_disk_capacity` resizes it while running. Once given, later starts keep
        the capacity file as it is (pass it again to reset it). Both need the test command.
        """
        environ = dict(env or {})
        if (powerloss or disk_capacity is not None) and self.command != TEST_BOOKIE_COMMAND:
            raise ValueError("the fault layers are installed only by the test command (bkframe.testing.faults.bookie)")
        if powerloss:
            environ["BKFRAME_POWERLOSS_SHADOW"] = str(self.shadow)
            environ["BKFRAME_POWERLOSS_ROOT"] = str(self.data_dir)
            self.data_dir.mkdir(parents=True, exist_ok=True)
        if disk_capacity is not None:
            self.set_disk_capacity(disk_capacity)
        if self.command == TEST_BOOKIE_COMMAND and self.capacity_file.exists():
            environ["BKFRAME_DISKFULL_ROOT"] = str(self.data_dir)
            environ["BKFRAME_DISKFULL_CAPACITY"] = str(self.capacity_file)
            self.data_dir.mkdir(parents=True, exist_ok=True)
        super().spawn(*extra, env=environ)

    def start(self, *extra: str, powerloss: bool = False, disk_capacity: int | None = None) -> Self:
        """:meth:`spawn`, then :meth:`wait_started`."""
        self.spawn(*extra, powerloss=powerloss, disk_capacity=disk_capacity)
        self.wait_started()
        return self

    def lose_power(self) -> None:
        """SIGKILL the bookie and keep only what it had fsynced (started with ``powerloss=True``)."""
        self.kill()
        lose_power(self.data_dir, self.shadow)

    def set_disk_capacity(self, capacity: int) -> None:
        """Resize the simulated disk (takes effect at once in a running bookie)."""
        set_capacity(self.capacity_file, capacity)


class Cluster(launcher.Cluster):
    """``Cluster(tmp_path, 3).start()``: bookies ``bookie-0`` ... on one metadata store
    (``sqlite://ROOT/metadata.db`` unless given), through the test entry point;
    ``powerloss=True`` starts each with the power-loss layer."""

    bookies: list[BookieProcess]  # type: ignore[assignment]

    def __init__(
        self,
        root: Path,
        bookies: int,
        metadata: str | None = None,
        bookie_args: tuple[str, ...] = (),
        powerloss: bool = False,
        *,
        command: Sequence[str] = TEST_BOOKIE_COMMAND,
        **options: Any,
    ) -> None:
        self.powerloss = powerloss
        super().__init__(root, bookies, metadata, bookie_args, command=command, **options)

    def new_bookie(self, data_dir: Path, **options: Any) -> BookieProcess:
        return BookieProcess(data_dir, **options)

    def spawn(self, bookie: launcher.BookieProcess) -> None:
        assert isinstance(bookie, BookieProcess)
        bookie.spawn(*self.bookie_args, powerloss=self.powerloss)

    def by_id(self, bookie_id: str) -> BookieProcess:
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    def close(self) -> None:
        """Kill every bookie, and drop their reserved space (:func:`drop_reserved_space`)."""
        super().close()
        for root in {self.root, *(b.data_dir for b in self.bookies)}:
            drop_reserved_space(root)


def drop_reserved_space(root: Path) -> int:
    """Remove the reserved-space files (``[bookie] reserved_space_bytes``, 64 MiB each by
    default) under ``root`` of bookies that are gone: a test's data dirs outlive it (pytest
    keeps its last temp dirs), and the suite's hundreds of bookies would otherwise keep tens
    of GB. Returns how many were removed."""
    removed = 0
    for path in root.rglob(RESERVE_FILE) if root.is_dir() else ():
        path.unlink(missing_ok=True)
        removed += 1
    return removed


class HostedCluster(Cluster):
    """Bookies each on a simulated host of its own (:mod:`bkframe.testing.faults.hosts`), bound to
    0.0.0.0 there: each registers its host's address (what it advertises), which clients on
    other hosts connect to. ``HostedCluster(root, hosts, metadata).start()``; the bookie on
    ``hosts[i]`` is ``bookie-i`` (:meth:`host_of` says which host a bookie is on).

    ``proxied=True`` puts a link proxy (:mod:`bkframe.testing.faults.link_control`) in front of each:
    the bookie binds its host's loopback, port :data:`PROXIED_PORT`, and advertises the
    host's address and that port, where :meth:`start_proxies` starts the proxy (call it
    before the bookies start). Every connection to the bookie -- clients', other bookies',
    the test's -- then goes through the proxy, whose link faults :meth:`proxy_of` switches;
    the host's partitions (cuts, isolation) still apply to it as to the bookie."""

    def __init__(
        self,
        root: Path,
        hosts: Sequence[Host],
        metadata: str,
        bookie_args: tuple[str, ...] = (),
        *,
        proxied: bool = False,
        **options: Any,
    ) -> None:
        self.hosts = list(hosts)
        self._unplaced = iter(self.hosts)
        self.proxied = proxied
        #: With ``proxied``: one per host, in the hosts' order (once started).
        self.proxies: list[LinkProxyProcess] = []
        self._control_dir: Path | None = None
        host_args = () if proxied else ("--host", "0.0.0.0")
        super().__init__(root, len(self.hosts), metadata, (*host_args, *bookie_args), **options)

    def new_bookie(self, data_dir: Path, **options: Any) -> BookieProcess:
        host = next(self._unplaced)
        args: tuple[str, ...] = ()
        if self.proxied:
            advertised = f"{host.address}:{PROXIED_PORT}"
            args = ("--host", "127.0.0.1", "--port", str(PROXIED_PORT), "--advertised-address", advertised)
        return BookieProcess(data_dir, prefix=host.command([]), args=args, **options)

    def start_proxies(self, *, seed: int = 0) -> None:
        """Start the proxies (``proxied=True``); they run until :meth:`close` or the network's."""
        assert self.proxied, "start_proxies() is for a HostedCluster(..., proxied=True)"
        # Control sockets in a short directory: a Unix socket's path has at most 107 bytes.
        self._control_dir = Path(tempfile.mkdtemp(prefix="bkf-links-"))
        for i, host in enumerate(self.hosts):
            proxy = LinkProxyProcess(
                f"{host.address}:{PROXIED_PORT}", f"127.0.0.1:{PROXIED_PORT}", self._control_dir / f"{host.name}.sock",
                self.root / f"proxy-{host.name}.log", seed=seed * 1000 + i,
            )
            proxy.spawn(host)
            self.proxies.append(proxy)
        for proxy in self.proxies:
            proxy.wait_started()

    def host_of(self, bookie_id: str) -> Host:
        return self.hosts[[b.bookie_id for b in self.bookies].index(bookie_id)]

    def proxy_of(self, bookie_id: str) -> LinkProxyProcess:
        return self.proxies[[b.bookie_id for b in self.bookies].index(bookie_id)]

    def close(self) -> None:
        super().close()
        for proxy in self.proxies:
            proxy.stop()
        if self._control_dir is not None:
            shutil.rmtree(self._control_dir, ignore_errors=True)
