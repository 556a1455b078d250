"""``bkframe ...`` as real processes, forked from one that has imported the CLI already.

A ``python -m bkframe ...`` spends most of its life importing bkframe, click, trio, numpy
(~0.5 CPU-s alone, 2-4 s of wall time on a loaded 2-core machine); the CLI tests start ~200
of them. :func:`bkframe_cli` runs each instead as a child forked from a *zygote* (one per
test process, started on first use): a process that imported the CLI's modules once and
then, per command, forks a child that takes the command's argv, environment, working
directory and stdin/stdout/stderr (files) and runs ``bkframe`` as ``python -m bkframe``
does (``runpy``, ``__main__``), exiting with its status. Each command is still a process of
its own -- its exit status, its output on file descriptors 1 and 2, a traceback printed by
the interpreter, what it leaves behind -- only its imports were paid for once. What an
import itself does wrong is tested by the tests that start ``python -m bkframe`` (signals,
the sandbox, ``--help``, the README's walk-through).

The protocol on the zygote's stdin and stdout: one JSON object a line each way; a request
``{"id", "argv", "env", "cwd", "stdin", "stdout", "stderr", "timeout"}`` (paths), a reply
``{"id", "code"}`` (``code`` None: killed after ``timeout`` s).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

#: The CLI's command modules the tests run (bkframe.cli.main imports each only when it runs).
PRELOAD = (
    "bkframe.cli.main", "bkframe.cli.ledger", "bkframe.cli.log", "bkframe.cli.log_tiering", "bkframe.cli.sub",
    "bkframe.cli.bookies", "bkframe.cli.cluster", "bkframe.cli.cookie", "bkframe.cli.autorecovery",
    "bkframe.cli.tier", "bkframe.cli.plugins", "bkframe.cli.bookie", "bkframe.cli.sandbox",
    # What the command modules import only when a command runs (tests/cli/test_light_commands.py).
    "bkframe.client.client", "bkframe.cli.stdin_lines", "bkframe.core.plugin_manager",
)


# -- the zygote (python -m tests.cli.forked_cli) ------------------------------------------------


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become ``python -m bkframe ARGV`` and exit with its status."""
    import runpy
    import traceback

    code: int = 1
    try:
        os.setpgid(0, 0)  # its own process group: a timeout kills what it started too
        for fd, path, flags in ((0, request["stdin"], os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                                (2, request["stderr"], os.O_WRONLY)):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = sys.__stdin__ = open(0, closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.argv = ["bkframe", *request["argv"]]
        try:
            runpy.run_module("bkframe", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:  # as the interpreter does with it
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - printed as the interpreter would, status 1
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream at exit is the command's business
                pass
    except BaseException:  # noqa: BLE001 - the child never returns into the zygote's loop
        traceback.print_exc()
    finally:
        os._exit(code & 0xFF)


def serve() -> None:
    """Fork a child per request line on stdin; answer each one's exit status on stdout."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from bkframe.core.plugin_manager import PluginManager

    PluginManager()  # imports the plugins' modules (each child loads its own manager)
    sys.stdout.flush()
    sys.stderr.flush()
    running: dict[int, tuple[Any, float]] = {}  # pid -> (request id, deadline)
    buffer = b""
    stdin_open = True

    def reply(ident: Any, code: int | None) -> None:
        os.write(1, (json.dumps({"id": ident, "code": code}) + "\n").encode())

    while stdin_open or running:
        readable, _, _ = select.select([0] if stdin_open else [], [], [], 0.01)
        if readable:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                stdin_open = False
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(request)
                running[pid] = (request["id"], time.monotonic() + request["timeout"])
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            ident, _ = running.pop(pid)
            reply(ident, os.waitstatus_to_exitcode(status))
        now = time.monotonic()
        for pid, (ident, deadline) in list(running.items()):
            if now > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:  # not its own group yet
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                del running[pid]
                reply(ident, None)


# -- the tests' side ------------------------------------------------------------------------------


class Zygote:
    """The test process's zygote: :meth:`run` may be called from several threads at once."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cli.forked_cli"], cwd=REPO, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=None, bufsize=0,
        )
        self.lock = threading.Lock()
        self.waiting: dict[int, tuple[threading.Event, list[int | None]]] = {}
        self.next_id = 0
        self.dir = Path(tempfile.mkdtemp(prefix="bkframe-cli-"))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            answer = json.loads(line)
            with self.lock:
                event, slot = self.waiting.pop(answer["id"])
            slot.append(answer["code"])
            event.set()
        with self.lock:  # the zygote is gone: nobody waits for ever
            for event, _slot in self.waiting.values():
                event.set()
            self.waiting.clear()

    def run(
        self, argv: list[str], stdin: bytes | None, env: dict[str, str], cwd: Path | None, timeout: float
    ) -> tuple[int | None, bytes, bytes]:
        with self.lock:
            ident = self.next_id
            self.next_id += 1
            event: threading.Event = threading.Event()
            slot: list[int | None] = []
            self.waiting[ident] = (event, slot)
        paths = {name: self.dir / f"{ident}.{name}" for name in ("stdin", "stdout", "stderr")}
        paths["stdin"].write_bytes(stdin or b"")
        paths["stdout"].touch()
        paths["stderr"].touch()
        request = {"id": ident, "argv": argv, "env": env, "cwd": str(cwd or os.getcwd()), "timeout": timeout,
                   **{k: str(v) for k, v in paths.items()}}
        assert self.proc.stdin is not None
        with self.lock:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
        event.wait()
        if not slot:
            raise RuntimeError(f"the CLI zygote exited (status {self.proc.poll()}) while running bkframe {argv}")
        out, err = paths["stdout"].read_bytes(), paths["stderr"].read_bytes()
        for path in paths.values():
            path.unlink()
        return slot[0], out, err

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for path in self.dir.iterdir():
            path.unlink()
        self.dir.rmdir()


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def zygote() -> Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.proc.poll() is not None:
            _zygote = Zygote()
            atexit.register(_zygote.close)
        return _zygote


def bkframe_cli(
    *args: str | Path, input: bytes | None = None, env: dict[str, str] | None = None, cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run([sys.executable, "-m", "bkframe", *args], input=input, env=env, cwd=cwd,
    capture_output=True, timeout=timeout)``, the process forked from the zygote (see the
    module's text). Raises :class:`subprocess.TimeoutExpired` as ``subprocess.run`` would."""
    argv = [str(a) for a in args]
    code, out, err = zygote().run(argv, input, dict(os.environ if env is None else env), cwd, timeout)
    if code is None:
        raise subprocess.TimeoutExpired([sys.executable, "-m", "bkframe", *argv], timeout, out, err)
    return subprocess.CompletedProcess([sys.executable, "-m", "bkframe", *argv], code, out, err)


def bkframe_text(
    *args: str | Path, stdin: str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """:func:`bkframe_cli` with text in and out (``text=True``)."""
    done = bkframe_cli(*args, input=None if stdin is None else stdin.encode(), env=env, cwd=cwd, timeout=timeout)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


if __name__ == "__main__":
    serve()
