"""Ctrl-C and SIGTERM on commands that stream, as real signals to real processes on one
cluster of real bookie processes: each closes what it opened (a ledger at its last
acknowledged entry, a log writer released, a cursor's acks stored), prints one line on
stderr, no traceback, and exits 130 (SIGINT) or 143 (SIGTERM). What the test sets up and
checks goes through an in-process client: a process more would cost seconds of imports."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TypeVar, cast

import pytest
import trio
import trio.testing

import bkframe
from bkframe.client.blocking import BlockingClient
from bkframe.client.bookies.errors import ClientClosedError
from bkframe.client.logs.model import Position
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import wait_until

T = TypeVar("T")

#: How long a process may take to print what the test waits for, or to close what it
#: opened and exit once stopped (the machine runs the suite at a load of 15).
WAIT_S = 60


@pytest.fixture(scope="module")
def client(shared_cluster: Cluster) -> Iterator[BlockingClient]:
    with bkframe.connect(shared_cluster.metadata) as bk:
        yield bk


#: Sets SIGINT's disposition ({}), then becomes ``python -m bkframe ARGS`` (the same process:
#: ``exec`` keeps an ignored signal ignored, a default one default).
LAUNCH = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.{}); "
    "os.execv(sys.executable, [sys.executable, '-m', 'bkframe', *sys.argv[1:]])"
)


class Command:
    """``bkframe ARGS`` as a real process: its stdout lines collected as they come (a
    thread), its stdin fed ``line-0``, ``line-1``, ... on :meth:`feed` (another).

    It starts with SIGINT at its default disposition, as a terminal's foreground job does,
    whatever this process has: a suite started as a shell's background job has SIGINT
    ignored, and so would each process it starts (``sigint_ignored=True``: as that)."""

    def __init__(self, *args: str, sigint_ignored: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-c", LAUNCH.format("SIG_IGN" if sigint_ignored else "SIG_DFL"), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.out: list[str] = []
        #: The lines written to its stdin, in order.
        self.written: list[str] = []
        self._stop_feeding = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.append(line.rstrip("\n"))

    def feed(self) -> None:
        def run() -> None:
            assert self.proc.stdin is not None
            try:
                while not self._stop_feeding.is_set():
                    batch = [f"line-{len(self.written) + i}" for i in range(50)]
                    self.proc.stdin.write("".join(f"{line}\n" for line in batch))
                    self.proc.stdin.flush()
                    self.written.extend(batch)
                    time.sleep(0.01)
            except (BrokenPipeError, ValueError, OSError):
                pass  # it stopped reading: as a signal should make it

        threading.Thread(target=run, daemon=True).start()

    def wait_for(self, count: int) -> None:
        """Until it has printed ``count`` lines (it fails if the process ends first)."""

        def printed() -> bool:
            assert self.proc.poll() is None, f"it ended: {self.proc.stderr.read() if self.proc.stderr else ''}"
            return len(self.out) >= count

        trio.run(partial(wait_until, printed, f"{count} lines printed", WAIT_S, every_s=0.02))

    def stop(self, signum: int, timeout_s: float = WAIT_S) -> str:
        """Send ``signum``, wait for the exit (and the rest of stdout); the one line it
        printed on stderr, checked for what must not be there, and its exit status."""
        self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # Say where it hung (CI saw bench wait a minute for its bookie once, 2026-11-29).
            self.proc.kill()
            self.proc.wait()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"it did not exit within {timeout_s} s of the signal; its stderr:\n{err[-4000:]}") from None
        finally:
            self._stop_feeding.set()
            self.proc.kill()
        self._reader.join(WAIT_S)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        assert "Traceback" not in err and "changing ensemble" not in err and " failed " not in err, err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, err
        assert self.proc.returncode == 128 + signum, (self.proc.returncode, err)
        return lines[0]


def word(signum: int) -> str:
    return "interrupted" if signum == signal.SIGINT else "terminated"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ledger_append_closes_its_ledger_at_the_last_acknowledged_entry(
    shared_cluster: Cluster, client: BlockingClient, signum: int
) -> None:
    writer = client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw", claim=False)
    ledger_id = writer.ledger_id
    append = Command("ledger", "append", str(ledger_id), "--metadata", shared_cluster.metadata, "--password", "pw")
    append.feed()
    append.wait_for(500)  # well under way: acknowledgements flowing
    line = append.stop(signum)
    last = int(append.out[-1])
    assert append.out == [str(i) for i in range(last + 1)]
    assert line == f"{word(signum)}: ledger {ledger_id} closed at entry {last}"
    # Closed by the command itself: opened without recovery, it is CLOSED at that entry, and
    # holds the lines in order.
    md = client.ledger_metadata(ledger_id)
    assert (md.closed, md.last_entry_id) == (True, last)
    entries = client.open_ledger(ledger_id, password=b"pw", recovery=False).read(0, last)
    assert [e.payload.decode() for e in entries] == append.written[: last + 1]


def test_a_log_writer_and_a_cursor_consumer_stop_cleanly(shared_cluster: Cluster, client: BlockingClient) -> None:
    """SIGTERM to ``log append``: the log is given up (the next writer recovers nothing);
    SIGINT to ``log tail -f --cursor``: a second run goes on after the last record the first
    printed, none twice, none skipped."""
    meta = ("--metadata", shared_cluster.metadata)
    client.logs.create("signals", rollover_entries=400)
    append = Command("log", "append", "signals", *meta)
    append.feed()
    append.wait_for(1)  # the log has its writer: the consumer starts where it writes
    tail = Command("log", "tail", "signals", *meta, "-f", "--cursor", "c", "--from", "earliest", "--positions")
    tail.wait_for(1000)  # across rollovers, while the writer goes on
    line = tail.stop(signal.SIGINT)
    first_run = [row.split("\t") for row in tail.out]
    resume = Position.parse(first_run[-1][0]).next()
    assert line == f"interrupted: cursor c stored: it resumes at {resume}"

    line = append.stop(signal.SIGTERM)
    assert line == f"terminated: log signals released (its last record {append.out[-1]})"
    record = client.logs.metadata("signals")
    assert record.writer == "" and all(s.closed for s in record.segments), record
    started = time.monotonic()
    client.logs.open_writer("signals").close()  # nothing to recover: at once
    assert time.monotonic() - started < 10

    rest = subprocess.run(
        [sys.executable, "-m", "bkframe", "log", "tail", "signals", *meta, "--cursor", "c", "--positions"],
        capture_output=True, text=True, timeout=WAIT_S,
    )
    assert rest.returncode == 0, rest.stderr
    second_run = [row.split("\t") for row in rest.stdout.splitlines()]
    assert [p for p, _ in first_run + second_run] == append.out
    assert [text for _, text in first_run + second_run] == append.written[: len(append.out)]


def test_a_followed_tail_says_what_it_printed(shared_cluster: Cluster, client: BlockingClient) -> None:
    """Ctrl-C to ``log tail -f`` (no cursor): its line says how far it got, as every other
    command's says what it closed."""
    meta = ("--metadata", shared_cluster.metadata)
    client.logs.create("followed")
    with client.logs.open_writer("followed") as writer:
        for i in range(3):
            writer.append(f"r{i}".encode())
    tail = Command("log", "tail", "followed", *meta, "-f", "--from", "earliest", "--positions")
    tail.wait_for(3)
    line = tail.stop(signal.SIGINT)
    assert line == f"interrupted: stopped reading log followed after 3 records (the last at {tail.out[-1].split()[0]})"


async def test_a_client_that_closes_with_appends_in_flight_blames_no_bookie(
    shared_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """What a cancelled command's client does to its connections is no bookie failure: no
    warning, no quarantine, no ensemble change."""
    caplog.set_level(logging.INFO, "bkframe")
    async with bkframe.open_client(shared_cluster.metadata) as bk:
        writer = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        await writer.append(b"connected")
        pendings = [writer.append_async(b"x" * 4096) for _ in range(5000)]
        # Sent: the client's tasks all wait (for the bookies' answers), far from all
        # acknowledged (20 MB).
        await trio.testing.wait_all_tasks_blocked()
    in_flight = [pa for pa in pendings if isinstance(pa.error, ClientClosedError)]
    assert in_flight, "every append was acknowledged before the client closed: nothing was tested"
    assert not [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert bk.context.counters.ensemble_changes == 0
    assert not any(bk.pool.health.quarantined(b) for b in writer.metadata.bookies())


def cmdline(pid: str | int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""  # gone already (a zombie's is empty too)


def processes_naming(path: Path) -> list[int]:
    """The live processes whose command line names ``path`` (a bench and its bookie name
    their data dir)."""
    needle = str(path).encode()
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and needle in cmdline(p.name)]


def wait_for(check: Callable[[], T], what: str) -> T:
    """What ``check`` returns once it is true (polled, bounded by :data:`WAIT_S`)."""
    return trio.run(partial(wait_until, check, what, WAIT_S, every_s=0.01))


@pytest.fixture
def bench_dir(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path``, for a bench and its bookie; what still names it after the test (a test
    that failed) is killed."""
    yield tmp_path
    for pid in processes_naming(tmp_path):
        os.kill(pid, signal.SIGKILL)


def bench_with_a_private_bookie(tmp_path: Path, *, sigint_ignored: bool = False) -> Command:
    """``bench appends`` with a bookie of its own in ``tmp_path/bookie`` (log: ``bookie.log``),
    far from done when a signal comes."""
    return Command("bench", "appends", "--count", "50000000", "--data-dir", str(tmp_path / "bookie"),
                   sigint_ignored=sigint_ignored)


def its_bookie(bench: Command) -> int:
    """The pid of the bookie ``bench`` started, as soon as that process exists (before the
    bookie is up: its imports take a second)."""
    children = Path(f"/proc/{bench.proc.pid}/task/{bench.proc.pid}/children")

    def bookie() -> int | None:
        assert bench.proc.poll() is None, "bench ended before it started a bookie"
        # The word "bookie" as an argument: a child forked but not yet exec'd (an import's
        # ldconfig) still has bench's own command line, whose --data-dir ends in "bookie".
        return next((int(pid) for pid in children.read_text().split() if b"\0bookie\0" in cmdline(pid)), None)

    return cast(int, wait_for(bookie, "bench's bookie process"))


def stopped_with_its_bookie(bench: Command, tmp_path: Path) -> str:
    """SIGINT sent to ``bench``: its one line, once it exited 130 and no process of its is left."""
    try:
        # Longer than bench's own bound on its bookie's stop (60 s, then SIGKILL): a stop
        # slowed by the suite's fsyncs is no failure of bench's.
        line = bench.stop(signal.SIGINT, timeout_s=WAIT_S + 30)
    except AssertionError as e:
        log = tmp_path / "bookie.log"
        raise AssertionError(f"{e}\nits bookie's log:\n{log.read_text()[-6000:] if log.exists() else '(none)'}") from None
    assert not processes_naming(tmp_path)
    return line


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["SIGINT-default", "SIGINT-inherited-ignored"])
def test_bench_stops_the_bookie_it_started(bench_dir: Path, sigint_ignored: bool) -> None:
    """SIGINT to ``bench`` as soon as its private bookie's process exists, while bench waits
    for it to start: the wait ends, the bookie is stopped, no process is left. Also when bench
    inherited SIGINT ignored (a suite started as a shell's background job): a Ctrl-C before
    bench's signal handling took SIGINT over was lost once, and bench ran its whole benchmark."""
    bench = bench_with_a_private_bookie(bench_dir, sigint_ignored=sigint_ignored)
    bookie_pid = its_bookie(bench)
    line = stopped_with_its_bookie(bench, bench_dir)
    assert line == f"interrupted: the bookie it started (pid {bookie_pid}) stopped"


def test_bench_stops_the_bookie_it_is_spawning(bench_dir: Path) -> None:
    """SIGINT to ``bench`` as soon as it opened its bookie's log, just before the spawn: the
    bookie is spawned all the same (a signal waits for the end of the spawn) and stopped."""
    bench = bench_with_a_private_bookie(bench_dir)
    wait_for(lambda: (bench_dir / "bookie.log").exists() or bench.proc.poll() is not None, "bench to open its bookie's log")
    line = stopped_with_its_bookie(bench, bench_dir)
    assert re.fullmatch(r"interrupted: the bookie it started \(pid \d+\) stopped", line), line


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum``."""
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    return bool(int(status["SigCgt"], 16) >> (signum - 1) & 1)


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["SIGINT-default", "SIGINT-inherited-ignored"])
def test_bench_interrupted_as_its_command_starts(bench_dir: Path, sigint_ignored: bool) -> None:
    """SIGINT to ``bench`` the moment its command runs (the root group's SIGTERM handler is
    in, after SIGINT's; bench is still importing, far from its bookie): it exits 130 with its
    one line, and leaves no bookie -- even when it inherited SIGINT ignored."""
    bench = bench_with_a_private_bookie(bench_dir, sigint_ignored=sigint_ignored)

    def runs() -> bool:
        assert bench.proc.poll() is None, "bench ended before a signal came"
        return b"\0-m\0bkframe\0" in cmdline(bench.proc.pid) and catches(bench.proc.pid, signal.SIGTERM)

    wait_for(runs, "bench's command to run")
    line = stopped_with_its_bookie(bench, bench_dir)
    # (The bookie too, when this process was slow to send the signal.)
    assert re.fullmatch(r"interrupted(: the bookie it started \(pid \d+\) stopped)?", line), line


@pytest.mark.parametrize("when", ["starting", "appending"])
def test_a_killed_bench_leaves_no_bookie(bench_dir: Path, when: str) -> None:
    """SIGKILL to ``bench`` (nothing of it runs to stop its bookie): the bookie goes all the
    same, on the SIGTERM the kernel sends it when bench ends -- while it starts, or once bench
    appends to it (then it drains and stops cleanly)."""
    bench = bench_with_a_private_bookie(bench_dir)
    bookie_pid = its_bookie(bench)
    log = bench_dir / "bookie.log"
    if when == "appending":
        wait_for(lambda: "authenticated" in log.read_text(), "bench's connection to its bookie")
    bench.proc.kill()
    bench.proc.wait(timeout=WAIT_S)
    wait_for(lambda: not processes_naming(bench_dir), "bench's bookie to end by itself")
    assert not cmdline(bookie_pid)
    if when == "appending":
        assert "received SIGTERM" in log.read_text() and "bookie stopped cleanly" in log.read_text(), log.read_text()
