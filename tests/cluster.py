"""A cluster of real bookie processes on one sqlite metadata store, for integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


class ClusterBookie:
    def __init__(self, bookie_id: str, data_dir: Path, metadata: str) -> None:
        self.bookie_id = bookie_id
        self.data_dir = data_dir
        self.metadata = metadata
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""
        self.shadow = data_dir.with_name(data_dir.name + "-synced")
        #: The bookie's stderr (its log), across restarts.
        self.log_path = data_dir.with_name(data_dir.name + ".log")
        #: With ``start(disk_capacity=...)``: the file holding the size of the simulated disk.
        self.capacity_file = data_dir.with_name(data_dir.name + "-capacity")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def lose_power(self) -> None:
        """SIGKILL the bookie and keep only what it had fsynced (see bkframe.testing.powerloss)."""
        from bkframe.testing.powerloss import lose_power

        self.kill()
        lose_power(self.data_dir, self.shadow)

    def set_disk_capacity(self, capacity: int) -> None:
        """Resize the simulated disk of a bookie started with ``disk_capacity`` (takes effect at once)."""
        from bkframe.testing.diskfull import set_capacity

        set_capacity(self.capacity_file, capacity)

    def start(self, *extra: str, powerloss: bool = False, disk_capacity: int | None = None) -> None:
        """``powerloss``: record what is fsynced, so that :meth:`lose_power` can drop the rest.
        ``disk_capacity``: the data dir behaves as a disk of this many bytes (see
        bkframe.testing.diskfull); :meth:`set_disk_capacity` resizes it while running. Once
        given, later starts keep the capacity file as it is (pass it again to reset it)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if powerloss:
            env["BKFRAME_POWERLOSS_SHADOW"] = str(self.shadow)
            env["BKFRAME_POWERLOSS_ROOT"] = str(self.data_dir)
            self.data_dir.mkdir(parents=True, exist_ok=True)
        if disk_capacity is not None:
            self.set_disk_capacity(disk_capacity)
        if self.capacity_file.exists():
            env["BKFRAME_DISKFULL_ROOT"] = str(self.data_dir)
            env["BKFRAME_DISKFULL_CAPACITY"] = str(self.capacity_file)
            self.data_dir.mkdir(parents=True, exist_ok=True)
        # The log goes to a file: a pipe nobody reads fills up and blocks the bookie.
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log_file:
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "bkframe", "bookie", "--data-dir", str(self.data_dir), "--port", "0",
                    "--metadata", self.metadata, "--bookie-id", self.bookie_id, *extra,
                ],
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                env=env,
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.wait(timeout=30)
            raise RuntimeError(f"bookie {self.bookie_id} did not start: {line!r} {self.log()[-2000:]}")
        self.address = line.split()[-1]

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

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


class Cluster:
    """``Cluster(tmp_path, 3).start()``; ``close()`` kills what is still running."""

    def __init__(
        self,
        root: Path,
        bookies: int,
        metadata: str | None = None,
        bookie_args: tuple[str, ...] = (),
        powerloss: bool = False,
    ) -> None:
        self.root = root
        self.bookie_args = bookie_args
        self.powerloss = powerloss
        self.metadata = metadata or f"sqlite://{root / 'metadata.db'}"
        self.bookies = [ClusterBookie(f"bookie-{i}", root / f"bookie-{i}", self.metadata) for i in range(bookies)]

    def start(self) -> Cluster:
        for b in self.bookies:
            b.start(*self.bookie_args, powerloss=self.powerloss)
        return self

    def by_id(self, bookie_id: str) -> ClusterBookie:
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    def close(self) -> None:
        for b in self.bookies:
            if b.running:
                b.kill()
