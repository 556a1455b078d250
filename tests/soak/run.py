"""The soak: the fault suite's harness (tests/faults) at a larger scale, for minutes.

:func:`soak_config` is a :class:`~tests.faults.schedule.RunConfig` of a partition run -- every
process on a simulated host of its own, every bookie behind a link proxy, the metadata on a
3-member ZooKeeper ensemble on hosts of its own -- with, on further hosts, named-log writers
and log consumers committing durable cursors (log_worker.py) and standalone ``bkframe
autorecovery`` services (auditor candidates and replication workers). :class:`SoakRun` adds
those to the harness's :class:`~tests.faults.harness.Run` through its hooks, samples the
under-replicated ledgers (the auditor's marks in the metadata store) and the bookies' memory
while the schedule plays, waits after the heal until autorecovery has nothing left to repair,
and checks the logs and cursors (log_checks.py) after the ledgers (tests/faults/checks.py).

Schedule rules for 30 bookies (on 2 cores): at most ``max_down`` = 3 bookies faulty at once
(3 of 30: two faulty bookies share a 3-bookie ensemble now and then, which a PD ledger rides
out by an ensemble change and a VD or BYPASS one by failing and being recovered); kill -9 and
power cuts stay alone while BYPASS ledgers are written (the suite's rule, schedule.py); a
fault every ``mean_gap_s`` = 4 s on average; a bookie down 1-20 s, so that some outages pass
the autorecovery services' ``lost_bookie_grace_s`` (5 s, after the registration's 6 s TTL)
and the auditor marks its ledgers under-replicated. The workers are paced down (4 ledger
writers with ledgers of at most 400 entries and up to 1 s between two, 2 log writers at
about 30 records a second each): 30 bookies, 30 proxies and 3 JVMs share two cores. On a
loaded machine the schedule falls behind its times (a bookie's restart, a ZooKeeper member
rejoining, ``ip`` commands on ~45 hosts all take longer): the soak plays every fault anyway,
later (``max_lag_s`` 30 min instead of the suite's 200 s), so it runs longer than
``--minutes``.

Clock faults (tests/faults/clock_faults.py) are in the mix through the partition runs'
weights (weight 1). :data:`EXTRA_WEIGHTS` is the hook for more: a fault kind added to
schedule.py and played by the harness joins the soak by a weight here.
"""

from __future__ import annotations

import collections
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from bkframe.core.plugin_manager import PluginManager
from tests.faults.checks import CheckResult
from tests.faults.harness import REPO, Run, RunReport, WorkerProc, file_tail
from tests.faults.records import read_records
from tests.faults.schedule import ALL_LEDGERS, PARTITION_WEIGHTS, Fault, RunConfig, make_schedule
from tests.soak.log_checks import check_logs

#: Fault kinds beyond the suite's, by weight (the hook for clock faults, see above).
EXTRA_WEIGHTS: dict[Fault, float] = {}
#: The autorecovery services' config: a bookie gone 5 s past its registration is lost.
AUTORECOVERY_CONFIG = """
[autorecovery]
lost_bookie_grace_s = 5
open_ledger_rereplication_grace_s = 30
audit_interval_s = 0
check_interval_s = 1
lock_ttl_s = 6
request_timeout_s = 10
max_retry_s = 10
"""
#: Seconds between two samples of the under-replicated ledgers and the bookies' memory.
SAMPLE_S = 5.0
#: After the heal: how long autorecovery may take to repair what is left.
REPAIR_WAIT_S = 300.0


def soak_config(seed: int, minutes: float, *, bookies: int = 30, partitions: bool = True, **overrides: Any) -> RunConfig:
    """The soak's run: as many faults as fit in ``minutes`` of schedule."""
    weights = {**PARTITION_WEIGHTS, Fault.KILL: 3.0, Fault.POWER_CUT: 3.0, Fault.HANG: 1.0, **EXTRA_WEIGHTS}
    base = {
        "seed": seed, "events": 1, "bookies": bookies, "writers": 4, "readers": 2, "ledgers": ALL_LEDGERS,
        "weights": tuple(weights.items()), "max_down": 3, "mean_gap_s": 4.0, "down_s": (1.0, 20.0),
        "hang_s": (0.5, 6.0), "partitions": partitions, "log_writers": 2, "log_consumers": 2, "autorecovery": 2,
        "writer_args": ("--max-entries", "400", "--pause", "1.0"), "warmup_s": 5.0, "cooldown_s": 10.0,
        "start_timeout_s": 20.0 * bookies, "max_lag_s": 1800.0,
        **overrides,
    }
    config = RunConfig(**base)
    # The draws do not depend on the number of faults: the largest count whose schedule ends in time.
    lo, hi = 1, max(2, int(minutes * 60 / 0.2))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        steps = make_schedule(attrs.evolve(config, events=mid))
        if steps and steps[-1].at_s <= minutes * 60:
            lo = mid
        else:
            hi = mid - 1
    return attrs.evolve(config, events=lo)


@attrs.define
class Samples:
    """What the sampler saw (a thread of its own: the schedule does not wait for it)."""

    #: ledger -> longest age of its under-replication mark seen, seconds.
    under_replicated: dict[int, float] = attrs.Factory(dict)
    most_marked: int = 0
    #: Samples of the marks taken (successful ones).
    taken: int = 0
    marked_now: int = -1
    #: The ledgers marked at the last sample.
    marked: frozenset[int] = frozenset()
    #: bookie id -> largest RSS seen, and the last, bytes.
    rss_max: dict[str, int] = attrs.Factory(dict)
    rss_last: dict[str, int] = attrs.Factory(dict)
    errors: collections.Counter[str] = attrs.Factory(collections.Counter)


class SoakRun(Run):
    def __init__(self, config: RunConfig, workdir: Path) -> None:
        super().__init__(config, workdir)
        (workdir / "autorecovery.toml").write_text(AUTORECOVERY_CONFIG)
        self.services: list[subprocess.Popen[bytes]] = []
        #: recovery worker name -> wall time it was started.
        self.recovery_started: dict[str, float] = {}
        self.limbo_waits: list[float] = []
        self.samples = Samples()
        self.sampling = threading.Event()
        self.sampler: threading.Thread | None = None
        #: The machine's load averages (1, 5, 15 min) at the start and after the schedule.
        self.load = [os.getloadavg()]

    # -- the soak's workers and services ------------------------------------------------

    def start_extra(self) -> None:
        for slot in range(self.config.log_writers):
            self.spawn_log_worker("logwriter", slot)
        for slot in range(self.config.log_consumers):
            self.spawn_log_worker("logconsumer", slot)
        for slot in range(self.config.autorecovery):
            self.services.append(self.spawn_service(slot))
        self.sampling.set()
        self.sampler = threading.Thread(target=trio.run, args=(self.sample_loop,), daemon=True)
        self.sampler.start()

    def spawn_log_worker(self, role: str, slot: int) -> WorkerProc:
        key = f"{role}{slot}"
        gen = self.generation[key]
        self.generation[key] += 1
        name = ("lw" if role == "logwriter" else "lc") + str(slot) + (f"g{gen}" if gen else "")
        return self.spawn(
            role, name, slot, "--slot", str(slot), "--logs", str(max(1, self.config.log_writers)),
            "--stop-file", str(self.stop_dir / name), module="tests.soak.log_worker",
        )

    def spawn_service(self, slot: int) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable, "-m", "bkframe", "autorecovery", "--metadata", self.cluster.metadata,
            "--config", str(self.workdir / "autorecovery.toml"), "--holder", f"ar{slot}",
        ]
        if self.network is not None:
            cmd = self.network.command("autorecovery", slot, cmd)
        with open(self.logs_dir / f"ar{slot}.log", "ab") as log_file:
            return subprocess.Popen(cmd, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT)

    def spawn_recovery(self, ledger: int) -> WorkerProc:
        worker = super().spawn_recovery(ledger)
        self.recovery_started[worker.name] = time.time()
        return worker

    def wait_out_of_limbo(self, bookie: Any) -> bool:
        started = time.monotonic()
        try:
            return super().wait_out_of_limbo(bookie)
        finally:
            self.limbo_waits.append(time.monotonic() - started)

    def supervise(self) -> None:
        for w in self.workers:
            if w.role in ("logwriter", "logconsumer") and not w.stopping and id(w) not in self.handled:
                code = w.proc.poll()
                if code is not None:
                    self.handled.add(id(w))
                    self.fail(f"{w.role} {w.name} exited with status {code}; log tail: {file_tail(w.log_path)}")
                    self.spawn_log_worker(w.role, w.slot)
        for slot, proc in enumerate(self.services):
            if proc.poll() is not None:
                self.fail(f"autorecovery ar{slot} exited with status {proc.returncode}; log tail: "
                          f"{file_tail(self.logs_dir / f'ar{slot}.log')}")
                self.services[slot] = self.spawn_service(slot)
        super().supervise()

    # -- sampling ----------------------------------------------------------------------

    async def sample_loop(self) -> None:
        store = PluginManager().metadata_store(self.cluster.metadata)
        try:
            while self.sampling.is_set():
                await self.sample(store)
                await trio.sleep(SAMPLE_S)
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()

    async def sample(self, store: Any) -> None:
        s = self.samples
        try:
            with trio.fail_after(15):
                marks = await store.list_under_replicated(start=0, limit=5000)
            now = time.time()
            s.marked_now = len(marks)
            s.marked = frozenset(m.ledger_id for m in marks)
            s.taken += 1
            s.most_marked = max(s.most_marked, len(marks))
            for m in marks:
                s.under_replicated[m.ledger_id] = max(s.under_replicated.get(m.ledger_id, 0.0), now - m.since)
        except (trio.TooSlowError, OSError, RuntimeError) as e:  # a member down, the store busy: next sample
            s.errors[type(e).__name__] += 1
        for bookie in self.cluster.bookies:
            rss = rss_of(bookie.proc)
            if rss:
                s.rss_last[bookie.bookie_id] = rss
                s.rss_max[bookie.bookie_id] = max(s.rss_max.get(bookie.bookie_id, 0), rss)

    # -- after the schedule --------------------------------------------------------------

    def before_stop(self) -> None:
        """Wait until autorecovery has repaired every marked ledger (or REPAIR_WAIT_S), then
        stop the services: the checks run on a quiet cluster."""
        self.load.append(os.getloadavg())
        until = time.monotonic() + REPAIR_WAIT_S
        taken = self.samples.taken
        while (self.samples.taken == taken or self.samples.marked_now != 0) and time.monotonic() < until:
            self.supervise()
            time.sleep(1.0)
        if self.samples.marked_now:
            self.fail(f"{self.samples.marked_now} ledger(s) still under-replicated {REPAIR_WAIT_S:.0f} s after the heal")
        self.sampling.clear()
        if self.sampler is not None:
            self.sampler.join(timeout=60)
        for proc in self.services:
            proc.send_signal(signal.SIGTERM)
        for slot, proc in enumerate(self.services):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
                self.fail(f"autorecovery ar{slot} did not stop on SIGTERM in 30 s")

    def extra_checks(self, result: CheckResult) -> None:
        records = list(read_records(self.records_dir))
        cfg = self.config
        try:
            trio.run(check_logs, self.cluster.metadata, records, cfg.seed, cfg.call_timeout_s, result)
        except trio.TooSlowError:
            result.fail("hung", "the log checks did not finish in their deadline")

    def run(self) -> RunReport:
        try:
            return super().run()
        finally:
            self.sampling.clear()
            for proc in self.services:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=30)


def rss_of(proc: subprocess.Popen[bytes] | None) -> int:
    if proc is None or proc.poll() is not None:
        return 0
    try:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def soak_table(run: SoakRun, report: RunReport) -> dict[str, str]:
    """The soak's results, one row each (docs/reliability.md records one run's)."""
    records = list(read_records(run.records_dir))
    recover_s = [
        r["t"] - run.recovery_started[r["src"]] for r in records
        if r["ev"] == "recovered" and r["src"] in run.recovery_started
    ]
    takeovers = [r["took_s"] for r in records if r["ev"] == "log-reopened"]
    check = report.check or CheckResult()
    faults = {k: v for k, v in report.done.items() if not k.startswith("skipped") and k in {f.value for f in Fault}}
    s = run.samples
    repaired = [age for ledger, age in s.under_replicated.items() if ledger not in s.marked]
    rss = sorted(s.rss_last.values())
    mib = 1 << 20
    divergent = sum(check.kinds[k] for k in ("wrong-bytes", "end-moved", "fenced-writer-added", "ack-beyond-close",
                                              "log-order", "cursor-ahead", "cursor-back"))
    return {
        "machine": f"{os.cpu_count()} cores, load average (1/5/15 min) at the start "
                   + " and after the schedule ".join("/".join(f"{x:.0f}" for x in la) for la in run.load),
        "faults by kind": ", ".join(f"{k} {v}" for k, v in sorted(faults.items())) + f" ({sum(faults.values())})",
        "skipped": ", ".join(f"{k} {v}" for k, v in sorted(report.done.items()) if k.startswith("skipped")) or "none",
        "acknowledged entries (ledgers)": f"{sum(check.acked.values())} in {sum(check.ledgers.values())} ledgers",
        "acknowledged records (logs)": f"{check.stats['log_acked']} (consumers read {check.stats['log_records_consumed']}; "
                                       f"{check.stats['cursors_checked']} cursors checked)",
        "lost": str(check.kinds["lost"]),
        "divergent": str(divergent),
        "other failures": str(len(report.all_failures) - check.kinds["lost"] - divergent),
        "longest recovery": f"{max(recover_s, default=0):.1f} s (ledger recovery, {len(recover_s)} runs); "
                            f"log takeover {max(takeovers, default=0):.1f} s ({len(takeovers)}); "
                            f"limbo wait {max(run.limbo_waits, default=0):.1f} s",
        "longest under-replicated": f"{max(repaired, default=0):.0f} s of the {len(repaired)} ledgers repaired "
                                    f"(at most {s.most_marked} marked at once; sampled every {SAMPLE_S:.0f} s); "
                                    f"still marked at the end: {sorted(s.marked) or 'none'}"
                                    + (f" (marked {max(s.under_replicated[x] for x in s.marked):.0f} s)" if s.marked else ""),
        "bookie RSS at the end": (f"max {max(rss) / mib:.0f} MiB, median {statistics.median(rss) / mib:.0f} MiB "
                                  f"(peak during the run {max(s.rss_max.values()) / mib:.0f} MiB)") if rss else "n/a",
    }
