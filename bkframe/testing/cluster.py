"""Starting bookies: the one launcher of bookie processes (tests, plugin authors' tests, the
sandbox, the benchmark), and an in-process bookie for the length of an ``async with``.

A :class:`BookieProcess` runs ``bkframe bookie`` on port 0 and waits for the ``listening on
HOST:PORT`` line it prints. By default it runs the *test* entry point
(``python -m bkframe.testing.bookie``), which installs the fault layers a test asks for
through the environment -- a power-loss layer (``powerloss=True``, then :meth:`lose_power`),
a disk of limited size (``disk_capacity=``, then :meth:`set_disk_capacity`) and injected
write failures (``$BKFRAME_WRITE_FAULTS``); ``command=BOOKIE_COMMAND`` runs the real command
(the sandbox does). A bookie's log (stderr) goes to a file next to its data dir: a pipe
nobody reads would fill and block it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from bkframe.admin import AdminServer
from bkframe.core.bookie.service import BookieService
from bkframe.core.config import Config, load_config
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.replication.autorecovery import in_bookie
from bkframe.core.replication.data_integrity import LimboRepair
from bkframe.errors import BKError

#: ``bkframe bookie`` as users run it.
BOOKIE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "bkframe", "bookie")
#: The same, with the fault layers the environment asks for installed first.
TEST_BOOKIE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "bkframe.testing.bookie")
#: How long a bookie may take to print its address.
START_TIMEOUT_S = 60.0


class BookieStartError(BKError):
    """A bookie process did not start; the message has the end of its log."""


def make_config(data_dir: Path, **bookie: Any) -> Config:
    """A bookie config with defaults, on port 0, with ``[bookie]`` overrides."""
    return load_config(None, {"data_dir": data_dir, "port": 0, **bookie})


@asynccontextmanager
async def running_bookie(config: Config, plugins: PluginManager | None = None) -> AsyncIterator[tuple[BookieService, str, int]]:
    """An in-process bookie for the duration of the block, stopped cleanly after it."""
    service = BookieService(config, plugins or PluginManager(), repair=LimboRepair, admin=AdminServer, autorecovery=in_bookie)
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(service.run)
        try:
            yield service, host, port
        finally:
            service.stop()


class BookieProcess:
    """One bookie process: ``BookieProcess(data_dir, metadata=uri).start()``.

    ``bookie_id``, ``metadata`` and ``args`` are passed at every start (with ``--port 0``);
    :meth:`start` takes more arguments for that start only.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        bookie_id: str = "",
        metadata: str = "",
        args: Sequence[str] = (),
        command: Sequence[str] = TEST_BOOKIE_COMMAND,
        log_path: Path | None = None,
        rack: str = "",
    ) -> None:
        self.data_dir = data_dir
        self.bookie_id = bookie_id
        #: The rack label it registers with (``--rack``); "" for none.
        self.rack = rack
        self.metadata = metadata
        self.args = tuple(args)
        self.command = tuple(command)
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""
        #: The admin HTTP service's URL (started with ``--http-port``), else "".
        self.http_url = ""
        #: The bookie's stderr (its log), across restarts.
        self.log_path = log_path or data_dir.with_name(data_dir.name + ".log")
        #: With ``powerloss=True``: what the bookie has fsynced (see bkframe.testing.powerloss).
        self.shadow = data_dir.with_name(data_dir.name + "-synced")
        #: With ``disk_capacity=``: the file holding the size of the simulated disk.
        self.capacity_file = data_dir.with_name(data_dir.name + "-capacity")

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

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
        environ = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        if (powerloss or disk_capacity is not None) and self.command != TEST_BOOKIE_COMMAND:
            raise ValueError("the fault layers are installed only by the test command (bkframe.testing.bookie)")
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
        cmd = [*self.command, "--data-dir", str(self.data_dir), "--port", "0"]
        if self.metadata:
            cmd += ["--metadata", self.metadata]
        if self.bookie_id:
            cmd += ["--bookie-id", self.bookie_id]
        if self.rack:
            cmd += ["--rack", self.rack]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log_file:
            self.proc = subprocess.Popen(
                [*cmd, *self.args, *extra], stdout=subprocess.PIPE, stderr=log_file, text=True, env=environ
            )
        self.address = ""
        self.http_url = ""

    def wait_started(self, timeout_s: float = START_TIMEOUT_S) -> BookieProcess:
        """Wait for the ``listening on`` line (after ``admin http on URL`` with ``--http-port``);
        :class:`BookieStartError` if it does not come."""
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if line.startswith("admin http on "):
            self.http_url = line.split()[-1]
            # No select here: the bookie prints the next line right after this one, and it
            # may be in the reader's buffer already, where select cannot see it.
            line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            if ready:
                code = self.proc.wait(timeout=30)
                why = f"exit status {code}"
            else:
                self.kill()
                why = f"no address printed within {timeout_s:.0f} s"
            tail = "\n".join(self.log().splitlines()[-20:])
            raise BookieStartError(
                f"bookie {self.bookie_id or self.data_dir} did not start ({why}); the end of its log {self.log_path}:\n{tail}"
            )
        self.address = line.split()[-1]
        return self

    def start(self, *extra: str, powerloss: bool = False, disk_capacity: int | None = None) -> BookieProcess:
        """:meth:`spawn`, then :meth:`wait_started`."""
        self.spawn(*extra, powerloss=powerloss, disk_capacity=disk_capacity)
        return self.wait_started()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)  # a hung (stopped) process dies as well
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def hang(self) -> None:
        """SIGSTOP: the bookie keeps its sockets (the kernel still accepts connections
        and buffers requests) but answers nothing until :meth:`resume`."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        """SIGTERM: the bookie stops accepting, drains, flushes and exits (see :meth:`wait`)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float = 60.0) -> int:
        """The exit status; SIGKILL (and TimeoutExpired) if it takes longer than ``timeout_s``."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def stop(self, timeout_s: float = 60.0) -> int:
        """:meth:`terminate` and :meth:`wait`: the exit status of a clean stop."""
        self.terminate()
        return self.wait(timeout_s)

    def lose_power(self) -> None:
        """SIGKILL the bookie and keep only what it had fsynced (started with ``powerloss=True``)."""
        from bkframe.testing.powerloss import lose_power

        self.kill()
        lose_power(self.data_dir, self.shadow)

    def set_disk_capacity(self, capacity: int) -> None:
        """Resize the simulated disk (takes effect at once in a running bookie)."""
        from bkframe.testing.diskfull import set_capacity

        set_capacity(self.capacity_file, capacity)


class Cluster:
    """``Cluster(tmp_path, 3).start()``: bookies ``bookie-0`` ... on one metadata store
    (``sqlite://ROOT/metadata.db`` unless given); ``close()`` kills what is still running.
    ``racks``: rack labels given to the bookies in turn (bookie i gets ``racks[i % len]``)."""

    def __init__(
        self,
        root: Path,
        bookies: int,
        metadata: str | None = None,
        bookie_args: tuple[str, ...] = (),
        powerloss: bool = False,
        *,
        first: int = 0,
        command: Sequence[str] = TEST_BOOKIE_COMMAND,
        racks: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.bookie_args = bookie_args
        self.powerloss = powerloss
        self.metadata = metadata or f"sqlite://{root / 'metadata.db'}"
        self.bookies = [
            BookieProcess(
                root / f"bookie-{i}",
                bookie_id=f"bookie-{i}",
                metadata=self.metadata,
                command=command,
                rack=racks[n % len(racks)] if racks else "",
            )
            for n, i in enumerate(range(first, first + bookies))
        ]

    def start(self, *, parallel: bool = False) -> Cluster:
        """Start the bookies one after the other, or (``parallel``) all at once, then wait for each."""
        try:
            if parallel:
                for b in self.bookies:
                    b.spawn(*self.bookie_args, powerloss=self.powerloss)
                for b in self.bookies:
                    b.wait_started()
            else:
                for b in self.bookies:
                    b.start(*self.bookie_args, powerloss=self.powerloss)
        except BaseException:
            self.close()
            raise
        return self

    def by_id(self, bookie_id: str) -> BookieProcess:
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM every running bookie at once, then wait for each (SIGKILL after ``timeout_s``)."""
        running = [b for b in self.bookies if b.running]
        for b in running:
            b.terminate()
        for b in running:
            try:
                b.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass  # killed

    def close(self) -> None:
        for b in self.bookies:
            if b.running:
                b.kill()
