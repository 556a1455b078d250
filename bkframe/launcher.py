"""Starting bookie processes on this machine: ``bkframe sandbox``, the benchmarks and the
tests run their bookies through this one launcher.

A :class:`BookieProcess` runs ``bkframe bookie`` on port 0 and waits for the ``listening on
HOST:PORT`` line it prints; a :class:`Cluster` is several of them on one metadata store. A
bookie's log (stderr) goes to a file next to its data dir: a pipe nobody reads would fill
and block it. :mod:`bkframe.testing.cluster` adds the fault layers tests use (power loss, a
disk of limited size) on top of these.

A command that starts a bookie for itself alone (``bkframe bench appends``) starts it with
``die_with_parent``: on Linux the kernel sends the bookie SIGTERM when the command ends, however
it ends (SIGKILL, a crash), so that it never outlives the command that owns it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from bkframe.common.environment import AUTH_TOKEN_ENV, METADATA_ENV, PASSWORD_ENV, SECURITY_ENV
from bkframe.errors import BKError

#: ``bkframe bookie`` as users run it.
BOOKIE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "bkframe", "bookie")
#: How long a bookie may take to print its address.
START_TIMEOUT_S = 60.0
#: Variables of the user's own cluster and credentials, left out of what a bookie started here
#: inherits: it gets its store from ``metadata`` (or runs without one), and never joins the
#: cluster ``$BKFRAME_METADATA`` names (``bkframe bench appends``'s private bookie did: a stray
#: bookie and cookie there, then "wrong master key" on that cluster's ledgers).
SCRUBBED_ENV: tuple[str, ...] = (METADATA_ENV, PASSWORD_ENV, AUTH_TOKEN_ENV, *SECURITY_ENV.values())


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait for the end of the block (in the main thread; elsewhere they
    do not interrupt Python code anyway): raised inside ``Popen``, after the fork, they would
    leave a running bookie without the object that stops it (``bench`` left one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        if caught:
            signal.raise_signal(caught[0])  # now, to the handler the block held it from


#: ``prctl``'s option that sets the signal a process gets when its parent ends (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def _death_signal_on_parent_exit() -> Callable[[], None] | None:
    """A ``preexec_fn`` (None off Linux) that has the kernel send the child SIGTERM when the
    thread that spawns it ends -- with the process, when that is the main thread. Checked
    after it is set: a parent that ended between the fork and the ``prctl`` sent nothing, and
    the child ends before its ``exec``. ``prctl`` is looked up here, in the parent: the child
    only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def set_death_signal() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os._exit(1)  # its parent has ended already: no signal will come

    return set_death_signal


class BookieStartError(BKError):
    """A bookie process did not start; the message has the end of its log."""


class BookieProcess:
    """One bookie process: ``BookieProcess(data_dir, metadata=uri).start()``.

    ``bookie_id``, ``metadata`` and ``args`` are passed at every start (with ``--port 0``);
    :meth:`start` takes more arguments for that start only. ``init_cluster``: start with
    ``--init-cluster`` (the bookie makes its metadata store a cluster if it is none).
    ``die_with_parent``: on Linux the bookie gets SIGTERM when the thread that spawned it
    ends (see the module's docstring): spawn it from the thread that lives as long as its
    owner (the main thread), never from a worker thread that a pool may end.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        bookie_id: str = "",
        metadata: str = "",
        args: Sequence[str] = (),
        command: Sequence[str] = BOOKIE_COMMAND,
        log_path: Path | None = None,
        rack: str = "",
        prefix: Sequence[str] = (),
        init_cluster: bool = False,
        die_with_parent: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.init_cluster = init_cluster
        self.die_with_parent = die_with_parent
        #: Put before the command, e.g. ``ip netns exec NS`` to run it in a simulated host.
        self.prefix = tuple(prefix)
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

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def spawn(self, *extra: str, env: Mapping[str, str] | None = None) -> None:
        """Start the process (see :meth:`wait_started`), with ``env`` added to the environment
        (less :data:`SCRUBBED_ENV`)."""
        inherited = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
        environ = {**inherited, **(env or {}), "PYTHONUNBUFFERED": "1"}
        cmd = [*self.prefix, *self.command, "--data-dir", str(self.data_dir), "--port", "0"]
        if self.metadata:
            cmd += ["--metadata", self.metadata]
        if self.bookie_id:
            cmd += ["--bookie-id", self.bookie_id]
        if self.rack:
            cmd += ["--rack", self.rack]
        if self.init_cluster:
            cmd += ["--init-cluster"]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        preexec = _death_signal_on_parent_exit() if self.die_with_parent else None
        with open(self.log_path, "a") as log_file, _signals_held():
            self.proc = subprocess.Popen(
                [*cmd, *self.args, *extra], stdout=subprocess.PIPE, stderr=log_file, text=True, env=environ,
                preexec_fn=preexec,
            )
        self.address = ""
        self.http_url = ""

    def wait_started(self, timeout_s: float = START_TIMEOUT_S) -> Self:
        """Wait for the ``listening on`` line (after ``admin http on URL`` with ``--http-port``);
        :class:`BookieStartError` if it does not come."""
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        return self._read_address(bool(ready), timeout_s)

    async def wait_started_async(self, timeout_s: float = START_TIMEOUT_S) -> Self:
        """:meth:`wait_started` in trio code: the wait for the bookie's first line is a
        checkpoint, so that a cancellation (a command's signal) ends it at once; the process
        is then still the caller's to stop."""
        import trio

        assert self.proc is not None and self.proc.stdout is not None
        ready = False
        with trio.move_on_after(timeout_s):
            await trio.lowlevel.wait_readable(self.proc.stdout)
            ready = True
        return self._read_address(ready, timeout_s)

    def _read_address(self, ready: bool, timeout_s: float) -> Self:
        """The rest of a wait for the start, once the bookie's stdout is ``ready`` to read
        (or not, after ``timeout_s``)."""
        assert self.proc is not None and self.proc.stdout is not None
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

    def start(self, *extra: str) -> Self:
        """:meth:`spawn`, then :meth:`wait_started`."""
        self.spawn(*extra)
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


class Cluster:
    """``Cluster(tmp_path, 3).start()``: bookies ``bookie-0`` ... on one metadata store
    (``sqlite://ROOT/metadata.db`` unless given); ``close()`` kills what is still running.
    ``racks``: rack labels given to the bookies in turn (bookie i gets ``racks[i % len]``).
    The bookies start with ``--init-cluster``: the first makes the store a cluster if it is
    none (``init_cluster=False`` leaves that to ``bkframe cluster init``)."""

    def __init__(
        self,
        root: Path,
        bookies: int,
        metadata: str | None = None,
        bookie_args: tuple[str, ...] = (),
        *,
        first: int = 0,
        command: Sequence[str] = BOOKIE_COMMAND,
        racks: Sequence[str] = (),
        init_cluster: bool = True,
    ) -> None:
        self.root = root
        self.bookie_args = bookie_args
        self.metadata = metadata or f"sqlite://{root / 'metadata.db'}"
        self.bookies = [
            self.new_bookie(
                root / f"bookie-{i}",
                bookie_id=f"bookie-{i}",
                metadata=self.metadata,
                command=command,
                rack=racks[n % len(racks)] if racks else "",
                init_cluster=init_cluster,
            )
            for n, i in enumerate(range(first, first + bookies))
        ]

    def start(self, *, parallel: bool = False) -> Self:
        """Start the bookies one after the other, or (``parallel``) all at once, then wait for each."""
        try:
            if parallel:
                for b in self.bookies:
                    self.spawn(b)
                for b in self.bookies:
                    b.wait_started()
            else:
                for b in self.bookies:
                    self.spawn(b)
                    b.wait_started()
        except BaseException:
            self.close()
            raise
        return self

    def new_bookie(self, data_dir: Path, **options: Any) -> BookieProcess:
        """One of the cluster's bookies (a launcher with more to its bookies overrides this)."""
        return BookieProcess(data_dir, **options)

    def spawn(self, bookie: BookieProcess) -> None:
        """Start one of the cluster's bookies (:meth:`start` waits for it)."""
        bookie.spawn(*self.bookie_args)

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
