"""The README's walk-through, run as a newcomer runs it: the commands of every fenced block
marked ``<!-- walk-through -->`` in README.md, in order, typed into one fresh shell (so
``export`` and ``id=$(...)`` carry over) in a directory laid out as a clone, each checked to
exit 0 without a traceback and to print what its comment says (``# prints A and B``: the
lines A and B, exactly). The commands are read from README.md itself, so the README cannot
drift from what works.

What this test changes, and why (every other command runs as written):

- ``./scripts/sandbox ARGS`` runs as ``.venv/bin/bkframe sandbox ARGS --no-spark``: the script
  first installs (the venv is there already), and the demo's Spark pipeline is
  plugins/spark/tests/test_pipeline.py's, which runs it on the suite's SparkSession.
- ``./scripts/test`` is not run: it is the suite this test is part of.
- ``/tmp/`` is a folder of this test's own, so that runs side by side do not share one.
- ``bench appends`` and ``bench sweep`` get smaller counts appended (the last option wins); their
  figures are tests/cli/test_bench_sweep.py's and test_bench_private.py's to check.
- The library example's ``/path/to/metadata.db`` is the README's sandbox's store.

A command whose comment says Ctrl-C stops it runs in the background until it says it is up;
then Ctrl-C (SIGINT to its process group, as a terminal sends it) stops it at once, unless
its comment goes on "in a second shell": then it runs until the walk-through ends.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import attrs
import pytest

from bkframe.cli.demo import DEMO_LOG, SPARK_COUNTS_LOG, SPARK_EVENTS_LOG

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- walk-through"
#: What a long-running command prints once it is up, by its bkframe subcommand.
READY = {"bookie": "listening on", "sandbox": "running;"}
#: Appended to these bkframe subcommands: the same command on less work.
SMALLER = {"bench appends": "--count 5000", "bench sweep": "--scale 0.001 --sizes 100 --windows 1 --no-plots"}
STEP_TIMEOUT_S = 120.0
#: The README's sandbox's store, in the clone: the library example's ``/path/to/metadata.db``.
SANDBOX_DB = "sandbox-data/metadata.db"
#: The demo: ledgers, a log, its offload (~15 s on a quiet machine; the CI machine runs at load 15).
DEMO_TIMEOUT_S = 400.0


@attrs.frozen
class Step:
    command: str
    comment: str

    @property
    def prints(self) -> list[str] | None:
        """The lines ``# prints A, B and C`` promises (up to ': ', ';' or ' ('), or None."""
        said = re.match(r"prints (.+?)(?:: |;| \(|$)", self.comment)
        return re.split(r", | and ", said.group(1).strip()) if said else None

    @property
    def subcommand(self) -> str:
        """The bkframe subcommand; a benchmark's with its group's (``bench sweep``)."""
        words = self.command.split()
        if not (words[0].endswith("/bkframe") and len(words) > 1):
            return ""
        return " ".join(words[1:3]) if words[1] == "bench" else words[1]


def walkthrough_steps(readme: str) -> list[Step]:
    """Every line of every shell block right after a walk-through marker, in order; a Python
    block is one step: the venv's Python runs it."""
    steps: list[Step] = []
    for lang, block in re.findall(rf"^{re.escape(MARKER)}.*?-->\n```(\w*)\n(.*?)^```", readme, re.M | re.S):
        if lang == "python":
            steps.append(Step(f".venv/bin/python - <<'PYTHON'\n{block}PYTHON", ""))
            continue
        for line in block.splitlines():
            command, _, comment = line.partition(" # ")
            if command.strip():
                steps.append(Step(command.strip(), comment.strip()))
    return steps


def as_run_here(step: Step, tmp: Path, clone: Path) -> Step | None:
    """The command as this test runs it (see the module's docstring); None: not run."""
    command = step.command.replace("/tmp/", f"{tmp}/").replace("/path/to/metadata.db", f"{clone}/{SANDBOX_DB}")
    if command.startswith("./scripts/test"):
        return None
    if command.startswith("./scripts/sandbox"):
        command = command.replace("./scripts/sandbox", ".venv/bin/bkframe sandbox", 1) + " --no-spark"
    elif command.startswith("./scripts/"):
        raise AssertionError(f"the walk-through runs {command!r}, which this test does not know how to run here")
    if (more := SMALLER.get(Step(command, "").subcommand)) is not None:
        command = f"{command} {more}"
    return Step(command, step.comment)


def lines_of(stream: IO[str]) -> queue.Queue[str | None]:
    """The stream's lines as they come (None at its end), read by a thread."""
    got: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            got.put(line)
        got.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return got


def read_until(lines: queue.Queue[str | None], mark: str, deadline: float, what: str) -> tuple[str, str]:
    """What came before the line holding ``mark``, and that line's rest after it."""
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"{what}: no end within its time; so far:\n{''.join(seen)[-3000:]}") from None
        assert line is not None, f"{what}: the shell ended; so far:\n{''.join(seen)[-3000:]}"
        if mark in line:
            before, _, after = line.partition(mark)
            return "".join(seen) + before, after.strip()
        seen.append(line)


class Shell:
    """One bash, fed the commands one by one as a user types them."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], cwd=cwd, env=env, text=True, start_new_session=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self.stdin = self.proc.stdin
        self.out, self.err = lines_of(self.proc.stdout), lines_of(self.proc.stderr)
        self.count = 0

    def run(self, command: str, timeout: float) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of one command; its stdin is empty unless it pipes."""
        self.count += 1
        mark = f"@@walk-through step {self.count}@@"
        self.stdin.write(f"{{ {command}\n}} </dev/null\nprintf '\\n%s %d\\n' '{mark}' $?\nprintf '\\n%s\\n' '{mark}' >&2\n")
        self.stdin.flush()
        deadline = time.monotonic() + timeout
        out, status = read_until(self.out, mark, deadline, command)
        err, _ = read_until(self.err, mark, deadline, command)
        return int(status), out.removesuffix("\n"), err.removesuffix("\n")

    def environment(self) -> dict[str, str]:
        """The shell's exported variables now (for a command started beside it)."""
        _, out, _ = self.run("env -0", 30)
        return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(timeout=30)


@attrs.define
class Background:
    """A command left running, as in a terminal of its own."""

    step: Step
    proc: subprocess.Popen[str]
    out: queue.Queue[str | None]
    printed: list[str] = attrs.field(factory=list)

    @classmethod
    def start(cls, step: Step, cwd: Path, env: dict[str, str]) -> Background:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {step.command}"], cwd=cwd, env=env, text=True, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        assert proc.stdout
        return cls(step, proc, lines_of(proc.stdout))

    def wait_until_up(self, ready: str, timeout: float) -> None:
        before, _ = read_until(self.out, ready, time.monotonic() + timeout, self.step.command)
        self.printed.append(before)

    def ctrl_c(self, timeout: float = 60.0) -> str:
        """SIGINT to its process group; what it printed, once it exited as Ctrl-C asks."""
        os.killpg(self.proc.pid, signal.SIGINT)
        status = self.proc.wait(timeout=timeout)
        rest = []
        while (line := self.out.get(timeout=10)) is not None:
            rest.append(line)
        printed = "".join(self.printed + rest)
        # 130: a command that says it was interrupted (issue 37 item 5's convention).
        assert status in (0, 130) and "Traceback" not in printed, f"{self.step.command} on Ctrl-C: {status}\n{printed}"
        return printed

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def clone(tmp_path: Path) -> Iterator[Path]:
    """A folder laid out as a clone that has run ``./scripts/sandbox`` once: the workspace's
    venv at ``.venv``, the repository's files beside it; whatever the commands write lands here."""
    here = tmp_path / "clone"
    here.mkdir()
    (here / ".venv").symlink_to(sys.prefix)
    for name in ("README.md", "conf", "docs", "examples", "scripts"):
        (here / name).symlink_to(REPO / name)
    (tmp_path / "tmp").mkdir()
    yield here


def check_demo(out: str, data: Path) -> None:
    """What the README says the demo does (all but the Spark pipeline; see the docstring)."""
    assert "PD_JOURNAL on" in out and "BYPASS_JOURNAL on" in out and "sandbox stopped" in out
    assert out.count("all match") == 5 and "MISMATCH" not in out
    # Times of single short runs, not rates (they swung 60-79k entries/s between runs).
    assert "entries/s" not in out and "not a benchmark" in out
    # The log: two writers in turn (the second fenced the first), 4 segments of 5000, a live
    # consumer whose cursor ends with no lag, a batch read in order.
    assert "created log 'demo'" in out and "fenced it (its next append: LogFencedError)" in out
    assert "segments (number:entries): 0:5000 1:5000 2:5000 3:5000; end 3:5000" in out
    assert "tailed 20000 entries" in out and "(lag now 0); all match" in out
    assert "all match, in order" in out and "Spark" not in out
    # Its closed segments offloaded to the sandbox's tier directory and read back from there.
    assert f"offloaded 4 closed segment(s) of log 'demo' (20000 entries) to {(data / 'tier').as_uri()}" in out
    assert "read 20000 entries back from 'earliest'" in out and "20000 from the objects" in out
    assert len(list((data / "tier").rglob("*.parquet"))) == 4


@pytest.mark.subprocess
@pytest.mark.timeout(900)
def test_the_readme_walk_through_prints_what_it_says(clone: Path) -> None:
    steps = walkthrough_steps((REPO / "README.md").read_text())
    assert [s.command.split()[0] for s in steps[:2]] == ["./scripts/sandbox", "./scripts/test"], steps
    # The demo runs here without Spark: its Spark logs must not be names the walk-through uses
    # either (the demo's "events" once made the README's 'log create events' fail).
    used = {s.command.split()[3] for s in steps if s.subcommand == "log" and s.command.split()[2] == "create"}
    assert used and not used & {DEMO_LOG, SPARK_EVENTS_LOG, SPARK_COUNTS_LOG}, used
    tmp = clone.parent / "tmp"
    # A fresh login's environment: none of the suite's variables (BKFRAME_*, JAVA_HOME, ...).
    fresh = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp)), "LANG": "C.UTF-8"}
    shell = Shell(clone, fresh)
    running: list[Background] = []
    try:
        for original in steps:
            step = as_run_here(original, tmp, clone)
            if step is None:
                continue
            if "Ctrl-C" in step.comment:
                bg = Background.start(step, clone, shell.environment())
                running.append(bg)
                bg.wait_until_up(READY[step.subcommand], STEP_TIMEOUT_S)
                if "second shell" not in step.comment:
                    bg.ctrl_c()
                    running.remove(bg)
                continue
            demo = "--demo" in step.command.split()
            status, out, err = shell.run(step.command, DEMO_TIMEOUT_S if demo else STEP_TIMEOUT_S)
            said = f"README step {original.command!r} (run as {step.command!r}): exit {status}\n{out[-3000:]}\n{err[-3000:]}"
            assert status == 0 and "Traceback" not in err, said
            if (prints := step.prints) is not None:
                assert out.splitlines() == prints, said
            if demo:
                check_demo(out, clone / "sandbox-data")
        # bench's own bookie joined none of the sandbox's cluster (it used to, through $BKFRAME_METADATA).
        status, out, _ = shell.run(".venv/bin/bkframe bookies list", STEP_TIMEOUT_S)
        assert status == 0 and len(out.splitlines()) == 3, out
        assert (tmp / "sweep" / "sweep.json").exists()
        assert [bg.step.subcommand for bg in running] == ["sandbox"]
        assert "sandbox stopped" in running[0].ctrl_c()
        shell.close()
    finally:
        for bg in running:
            bg.kill()
        if shell.proc.poll() is None:
            os.killpg(shell.proc.pid, signal.SIGKILL)
