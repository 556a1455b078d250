"""Clock faults on real processes (libfaketime, :mod:`bkframe.testing.faults.clocks`): bookies, a
log writer and the auditor whose wall clocks jump an hour either way or run twice as fast,
changed while they run. Deadlines, leases and TTLs are on monotonic clocks, so nothing
moves: every bookie stays registered, the auditor keeps its lock and declares no live
bookie lost, and a dead one is found lost after the grace, neither early nor an hour late.
The log's times (seek by time, retention by age, cursor idleness) are the clients' wall
clocks, as docs/logs.md says; a time from the future counts as now.

One cluster for the module (3 bookies on sqlite, an autorecovery process), each process on
a clock file of its own; the tests run in order (the last kills bookies).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import bkframe
from bkframe import Position
from bkframe.testing.cluster import Cluster
from bkframe.testing.faults.clocks import (
    AHEAD,
    BEHIND,
    FAST,
    HOUR,
    clock_env,
    fast_from_now,
    require_faketime,
    set_clock,
)

REPO = Path(__file__).resolve().parents[2]

#: Short TTLs so that a lease moved by a clock step (an hour) would show within seconds; not
#: so short that a heartbeat late on a loaded machine drops a registration: 2 s and 4 s did
#: in loaded full-suite runs, and 6 s once in CI, where two bookies' renewals came 10.8 s
#: apart (each commit waited on a disk stalled by the suite's fsyncs, and the next renewal
#: came a third of a TTL after the slow one ended). Renewals now commit without an fsync and
#: follow a slow one at once (tests/plugins/test_metadata_sqlite.py); a bookie logs a
#: heartbeat later than its TTL, and a failure here prints the processes' logs.
REGISTRATION_TTL_S = 6.0
LOST_GRACE_S = 6.0
BOOKIE_TOML = f"""
[bookie]
registration_ttl_s = {REGISTRATION_TTL_S}
"""
AUTORECOVERY_TOML = f"""
[autorecovery]
lost_bookie_grace_s = {LOST_GRACE_S}
check_interval_s = 0.5
lock_ttl_s = 4.0
request_timeout_s = 10.0
"""
#: libfaketime reads a changed clock file within a second (FAKETIME_CACHE_DURATION). A
#: process shows no sign of having read it, so this window is the only way to know.
CLOCK_CHANGE_S = 1.5
#: Two of the auditor's looks at the bookies (one every 0.5 s): by then it has seen a bookie
#: gone. It logs nothing until the bookie is lost, so there is no event to wait for.
AUDITOR_LOOKS_S = 1.0


@attrs.define
class ClockedCluster:
    cluster: Cluster
    clocks: Path
    auditor: subprocess.Popen[bytes]
    auditor_log: Path
    #: When the bookies and the auditor started (monotonic): FAST runs fast from the set on.
    started: float

    @property
    def metadata(self) -> str:
        return self.cluster.metadata

    def clock(self, name: str) -> Path:
        return self.clocks / f"{name}.clock"

    def set(self, **specs: str) -> None:
        for name, spec in specs.items():
            spec = fast_from_now(time.monotonic() - self.started) if spec == FAST else spec
            set_clock(self.clock(name.replace("_", "-")), spec)


@pytest.fixture(scope="module")
def clocked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClockedCluster]:
    require_faketime()
    root = tmp_path_factory.mktemp("clocks")
    clocks = root / "clocks"
    (root / "bookie.toml").write_text(BOOKIE_TOML)
    (root / "autorecovery.toml").write_text(AUTORECOVERY_TOML)
    cluster = Cluster(root / "cluster", 3, bookie_args=("--config", str(root / "bookie.toml")))
    auditor_log = root / "auditor.log"
    auditor: subprocess.Popen[bytes] | None = None
    started = time.monotonic()
    try:
        for bookie in cluster.bookies:
            bookie.spawn(*cluster.bookie_args, env=clock_env(clocks / f"{bookie.bookie_id}.clock"))
        for bookie in cluster.bookies:
            bookie.wait_started()
        with open(auditor_log, "wb") as out:
            auditor = subprocess.Popen(
                [sys.executable, "-m", "bkframe.testing.faults.clocks", "autorecovery", "--metadata", cluster.metadata,
                 "--config", str(root / "autorecovery.toml"), "--holder", "auditor"],
                env={**os.environ, **clock_env(clocks / "auditor.clock"), "PYTHONPATH": str(REPO)},
                stdout=out, stderr=subprocess.STDOUT,
            )
        yield ClockedCluster(cluster, clocks, auditor, auditor_log, started)
    finally:
        if auditor is not None:
            auditor.kill()
            auditor.wait(timeout=30)
        cluster.close()


def run_client(clocked: ClockedCluster, clock: str, spec: str, script: str) -> Any:
    """Run ``script`` (Python, with ``bk``: a blocking client) in a process of its own on a
    clock set to ``spec``; its last line of output is JSON, returned."""
    code = (
        "import json, sys, bkframe\nfrom bkframe.testing.faults.clocks import install_from_env\ninstall_from_env()\n"
        f"with bkframe.connect({clocked.metadata!r}) as bk:\n"
        + "".join(f"    {line}\n" for line in script.strip().splitlines())
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **clock_env(clocked.clock(clock), spec), "PYTHONPATH": str(REPO)},
        capture_output=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def test_a_log_writer_an_hour_ahead(clocked: ClockedCluster) -> None:
    """Bookies' clocks do not enter a log's times at all; the writer's do. A writer an hour
    ahead stamps its records an hour ahead: seek by time goes by those stamps, and to a
    trimmer on a true clock they are from the future -- not old, so retention keeps them,
    and the cursor its consumer (on the same clock) acked is not idle."""
    clocked.set(bookie_0=AHEAD, bookie_1=BEHIND, bookie_2=FAST)
    time.sleep(CLOCK_CHANGE_S)
    written = run_client(clocked, "writer", AHEAD, """
bk.logs.create("clocked", rollover_entries=10, retention_s=1800, cursor_ttl_s=1800)
bk.logs.create_cursor("clocked", "consumer")
with bk.logs.open_writer("clocked") as w:
    positions = [str(w.append(b"record %d" % i)) for i in range(25)]
reader = bk.logs.reader("clocked")
stamps = [e.timestamp for e in reader.read("earliest")]
bk.logs.ack("clocked", "consumer", bkframe.Position.parse(positions[-1]))
bk.logs.flush_cursors("clocked")
print(json.dumps({"positions": positions, "stamps": stamps}))
""")
    now_ms = time.time() * 1000
    stamps, positions = written["stamps"], [Position.parse(p) for p in written["positions"]]
    assert len(stamps) == 25
    assert all(now_ms + (HOUR - 120) * 1000 < s < now_ms + (HOUR + 5) * 1000 for s in stamps), (now_ms, stamps)

    async def check() -> None:
        async with bkframe.open_client(clocked.metadata) as bk:
            reader = await bk.logs.reader("clocked")
            # Seek by time is by the writer's stamps: "now" on a true clock is before all of them.
            assert await reader.position_at(int(now_ms)) == positions[0]
            assert await reader.position_at(stamps[12]) == positions[12]
            # Records from the future are not old: retention by age (30 min) trims nothing.
            result = await bk.logs.trim("clocked", retention=True)
            assert result.removed == () and result.start == positions[0]
            (info,) = await bk.logs.cursor_infos("clocked")
            assert not info.expired and info.idle_s == 0.0, info

    trio.run(check)


def test_clock_steps_move_no_lease_and_a_dead_bookie_is_found_on_time(clocked: ClockedCluster) -> None:
    """Bookies' clocks jump an hour either way or run fast, and the auditor's an hour ahead:
    every bookie stays registered, the auditor keeps its lock and marks nothing, and writes
    go on. Then a bookie dies and the auditor's clock jumps after it saw it go: the bookie is
    found lost after the grace -- neither an hour late (behind) nor at once (ahead)."""

    def logs() -> str:
        """The processes' logs, for a failure's message."""
        return "\n".join(
            f"--- {b.bookie_id}:\n{b.log()[-2500:]}" for b in clocked.cluster.bookies
        ) + f"\n--- auditor:\n{clocked.auditor_log.read_text(errors='replace')[-2500:]}"

    async def watch(bk: Any, seconds: float) -> None:
        ids = {b.bookie_id for b in clocked.cluster.bookies}
        until = trio.current_time() + seconds
        while trio.current_time() < until:
            registered = {b.bookie_id for b in await bk.metadata.list_bookies()}
            assert registered == ids, f"registered {sorted(registered)}, running {sorted(ids)}\n{logs()}"
            assert await bk.metadata.lock_holder("auditor") == "auditor"
            assert await bk.metadata.count_under_replicated() == 0
            await trio.sleep(0.2)

    async def lost_after(bk: Any, bookie_id: str, auditor_clock: str) -> float:
        """Kill the bookie, wait until its registration is gone, then step the auditor's
        clock (once the auditor has seen it gone); seconds from the registration's end until
        the auditor marks the bookie's ledgers."""
        clocked.cluster.by_id(bookie_id).kill()
        with trio.fail_after(REGISTRATION_TTL_S + 10):
            while bookie_id in {b.bookie_id for b in await bk.metadata.list_bookies()}:
                await trio.sleep(0.1)
        gone = trio.current_time()
        await trio.sleep(AUDITOR_LOOKS_S)
        clocked.set(auditor=auditor_clock)
        with trio.fail_after(LOST_GRACE_S + 30):
            while not any(bookie_id in m.bookies for m in await bk.metadata.list_under_replicated()):
                await trio.sleep(0.1)
        return trio.current_time() - gone

    async def main() -> None:
        async with bkframe.open_client(clocked.metadata) as bk:
            with trio.fail_after(30):
                while await bk.metadata.lock_holder("auditor") != "auditor":
                    await trio.sleep(0.2)
            writer = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
            # A bookie an hour behind, one an hour ahead, one fast; the auditor ahead.
            clocked.set(bookie_0=BEHIND, bookie_1=AHEAD, bookie_2=FAST, auditor=AHEAD)
            for i in range(20):
                await writer.append(b"entry %d" % i)
            # A lease timed by a wrong wall clock would be gone within a TTL of the change.
            await watch(bk, CLOCK_CHANGE_S + REGISTRATION_TTL_S + 1.0)
            await writer.close()
            # The auditor saw bookie-2 go; its clock then jumps an hour behind: the bookie is
            # found lost after the grace, not an hour late ...
            waited = await lost_after(bk, "bookie-2", BEHIND)
            assert waited <= LOST_GRACE_S + 15, waited
            # ... and an hour ahead: the grace still runs its full length (a wall-clock
            # grace would be over at once).
            waited = await lost_after(bk, "bookie-1", AHEAD)
            assert LOST_GRACE_S - 1.0 <= waited <= LOST_GRACE_S + 15, waited
            # bookie-0, an hour behind all along, is still registered and not lost.
            assert "bookie-0" in {b.bookie_id for b in await bk.metadata.list_bookies()}
            assert not any("bookie-0" in m.bookies for m in await bk.metadata.list_under_replicated()), logs()

    trio.run(main)
    assert clocked.auditor.poll() is None, clocked.auditor_log.read_text()[-3000:]
