"""Runs a fault schedule on a real cluster and judges the result.

One run: start the bookies (each with the power-loss layer, so power cuts are possible) on
a sqlite metadata store (partition runs: a ZooKeeper ensemble, see network.py), start the
writer and reader processes, play the schedule (see schedule.py), heal everything, stop the
workers, then check what the cluster holds against what the workers recorded (see
checks.py). Subscription runs (``RunConfig.subscriptions``) also make a log with a
key_shared subscription, run a producer and consumers of it (sub_worker.py), drain it
after the workers stopped and judge what they all recorded (sub_checks.py). Compaction runs
(``RunConfig.compaction``) make a compacted log with its writer, a compactor the schedule
kills and a table reader (compaction_run.py), and judge the log and the reads
(compaction_checks.py). Every step has
a deadline; a step that passes it becomes a failure naming the step, and the run goes on to
collect everything it can.

Use :func:`run_faults`; ``python -m tests.faults --seed N`` runs one outside pytest.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

import bkframe
from bkframe.testing.cluster import BookieProcess, Cluster
from bkframe.testing.faults.filling_disk import used_bytes
from bkframe.testing.faults.small_fs import SmallFilesystem
from bkframe.testing.faults.small_fs import mount as mount_small_fs
from tests.faults.checks import CheckResult, check_cluster
from tests.faults.clock_faults import CLOCK_ACTIONS, FaultClocks
from tests.faults.compaction_checks import check_compaction
from tests.faults.compaction_run import CompactionWorkload
from tests.faults.network import NETWORK_ACTIONS, FaultNetwork, FaultNetworkError
from tests.faults.payloads import WRITER_KEY
from tests.faults.procs import WorkerProc, file_tail, resume_worker
from tests.faults.records import RecordFile, read_record_file, read_records
from tests.faults.schedule import COMPACTOR_ACTIONS, CONSUMER_ACTIONS, HEALS, Fault, RunConfig, Step, make_schedule
from tests.faults.sub_checks import check_subscriptions
from tests.faults.sub_run import SubscriptionWorkload
from tests.faults.worker import GAVE_UP_EXIT, HUNG_EXIT

REPO = Path(__file__).resolve().parents[2]

#: Journal files small enough for the power-loss layer (it copies a whole file at each fsync),
#: frequent checkpoints so that a power cut finds some BYPASS data flushed and some not.
BOOKIE_CONFIG = """
[bookie]
checkpoint_interval_s = 3.0
disk_check_interval_s = 0.5

[journal]
plugin = "journal_fs"
preallocate_bytes = 0
max_file_size = 262144

[entry_log_manager]
plugin = "single"
max_log_size = 2097152
"""

#: The simulated disk of a bookie that is not full: far more than a run writes.
ROOMY_DISK = 1 << 40
#: The size of a ``small_disk`` run's real filesystem (the run that found issue 45 used 16 MiB).
SMALL_DISK_BYTES = 16 << 20
LIMBO_TIMEOUT_S = 120.0
LIMBO_S_PER_LEDGER = 2.0
#: A recovery started during the run retries "not decidable yet" this long.
RECOVER_GIVE_UP_S = 120.0
#: Where failed runs' evidence is copied (see run_faults).
KEEP_ENV = "BKFRAME_FAULTS_KEEP"
async def open_ledgers_tagged(client: bkframe.Client, writer_name: str, after: int) -> list[int]:
    """Open ledgers with ids above ``after`` that ``writer_name`` created: a writer killed
    between create_ledger's return and its "created" record leaves one nobody knows of,
    and a bookie restarted unclean keeps it in limbo until a client recovers it (BP-46)."""
    found = []
    for ledger in sorted(i for i in await client.list_ledgers() if i > after):
        try:
            md = await client.metadata.read_ledger(ledger)
        except bkframe.NoSuchLedgerError:
            continue
        if md.custom.get(WRITER_KEY) == writer_name and not md.closed:
            found.append(ledger)
    return found


@attrs.define
class RunReport:
    config: RunConfig
    workdir: Path
    steps: list[Step]
    done: collections.Counter[str] = attrs.Factory(collections.Counter)
    #: Failures of the harness's own steps (a bookie that does not start, limbo that does
    #: not clear, a worker that does not stop); the checks add theirs.
    failures: list[str] = attrs.Factory(list)
    check: CheckResult | None = None
    #: Worth a look, not failures (tracebacks in bookie logs).
    notes: list[str] = attrs.Factory(list)
    seconds: float = 0.0
    #: Seconds spent in each phase of the run.
    phases: dict[str, float] = attrs.Factory(dict)
    #: How to run this again (the seeded test's command unless the caller says otherwise).
    reproduce: str = ""
    #: Partition runs: what the link faults did (FaultNetwork.summary).
    network: str = ""

    @property
    def all_failures(self) -> list[str]:
        return self.failures + (self.check.failures if self.check is not None else [])

    @property
    def ok(self) -> bool:
        return not self.all_failures

    def summary(self) -> str:
        cfg = self.config
        faults = {k: v for k, v in self.done.items() if k not in HEALS and not k.startswith("skipped")}
        skipped = {k: v for k, v in self.done.items() if k.startswith("skipped")}
        heals = sum(v for k, v in self.done.items() if k in HEALS)
        lines = [
            f"fault run seed={cfg.seed}: {sum(faults.values())} of {cfg.events} faults done "
            f"({', '.join(f'{k} {v}' for k, v in sorted(faults.items())) or 'none'}; {heals} heals"
            + "".join(f"; {k} {v}" for k, v in sorted(skipped.items()))
            + ") "
            f"in {self.seconds:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in self.phases.items())}), "
            f"{cfg.bookies} bookies, {cfg.writers} writers, {cfg.readers} readers"
            + (f", a log producer and {cfg.consumers} consumers of its key_shared subscription (lease "
               f"{cfg.sub_lease_s:g} s, {cfg.sub_state_ledger_type} state ledgers)" if cfg.subscriptions else "")
            + (", each on a simulated host (bookies behind link proxies; metadata on a 3-member ZooKeeper ensemble)"
               if cfg.partitions else ""),
            "ledger menu: " + ", ".join(f"{k} {e}/{w}/{a}" for k, e, w, a in cfg.ledgers),
            *([self.network] if self.network else []),
        ]
        if self.check is not None:
            lines.extend(self.check.summary_lines())
        failures = self.all_failures
        lines.append(f"FAILURES: {len(failures)}" if failures else "no failures")
        for f in failures[:60]:
            lines.append(f"  - {f}")
        if len(failures) > 60:
            lines.append(f"  ... and {len(failures) - 60} more (all in {self.workdir / 'report.txt'})")
        for n in self.notes[:5]:
            lines.append(f"  note: {n.splitlines()[0]}")
        sub = " --fault-subscriptions" if cfg.subscriptions else ""
        reproduce = self.reproduce or (
            f"uv run --all-packages pytest tests/faults/test_faults.py::test_seeded_fault_schedule "
            f"--fault-seed {cfg.seed} --fault-events {cfg.events}{sub} -s   (or: uv run --all-packages python -m "
            f"tests.faults --seed {cfg.seed} --events {cfg.events}{' --subscriptions' if sub else ''})"
        )
        lines.append(f"reproduce: {reproduce}")
        lines.append(f"workdir (records/*.jsonl, logs/*.log, schedule.txt): {self.workdir}")
        return "\n".join(lines)


class Run(SubscriptionWorkload, CompactionWorkload):
    def __init__(self, config: RunConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.records_dir = workdir / "records"
        self.logs_dir = workdir / "logs"
        self.stop_dir = workdir / "stop"
        for d in (self.records_dir, self.logs_dir, self.stop_dir):
            d.mkdir(parents=True, exist_ok=True)
        written_once = f'\n[ledger_storage]\nplugin = "default"\nlarge_entry_bytes = {config.large_entry_bytes}\n'
        (workdir / "bookie.toml").write_text(BOOKIE_CONFIG + (written_once if config.large_entry_bytes else ""))
        bookie_args = ("--config", str(workdir / "bookie.toml"))
        #: Partition runs: every process on a simulated host of its own (tests/faults/network.py).
        self.network = FaultNetwork(config) if config.partitions else None
        if self.network is not None:
            self.cluster: Cluster = self.network.cluster(workdir / "cluster", bookie_args)
        else:
            self.cluster = Cluster(workdir / "cluster", config.bookies, bookie_args=bookie_args, powerloss=True)
        self.steps = make_schedule(config)
        #: With ``small_disk``: the real small filesystem of the bookie the schedule fills
        #: first (the last bookie if none): its data dir inside; its log, power-loss shadow
        #: and the filler files outside the data dir.
        self.small_fs: SmallFilesystem | None = None
        if config.small_disk:
            target = next((s.target for s in self.steps if s.action == Fault.DISK_FULL.value), config.bookies - 1)
            self.small_fs = mount_small_fs(config.small_disk, workdir / "small-disk", SMALL_DISK_BYTES)
            self.cluster.bookies[target].data_dir = self.small_fs.path / "data"
        self.report = RunReport(config, workdir, self.steps)
        self.workers: list[WorkerProc] = []
        self.generation: collections.Counter[str] = collections.Counter()
        self.recoveries = 0
        #: Workers whose exit supervise() has dealt with (by id()).
        self.handled: set[int] = set()
        #: Faults not injected (their heals are skipped too).
        self.skipped: set[int] = set()
        #: Why kill -9 and power cuts stopped (BYPASS runs), if they did.
        self.no_more_unclean = ""
        #: Bookies that should be running and answering (not killed, hung or full on purpose).
        self.expected_up = [True] * config.bookies
        #: With clock faults in the mix, every bookie on a clock of its own (clock_faults.py).
        self.clocks = FaultClocks(workdir / "clocks") if config.weight(Fault.CLOCK) > 0 else None
        #: Subscription runs: consumers the schedule hung (SIGSTOP), by slot, until resumed.
        self.hung_consumers: dict[int, WorkerProc] = {}
        #: Hangs' heals due on time whatever the schedule's loop waits on, by fault id (heal_on_time).
        self.heal_timers: dict[int, threading.Timer] = {}
        #: When the schedule's time 0 was (time.monotonic()).
        self.t0 = 0.0
        #: Subscription runs: what the harness did to the consumers (kills), for the checks.
        self.harness_records = RecordFile(self.records_dir / "harness.jsonl", "harness") if config.subscriptions else None

    # -- bookies -------------------------------------------------------------------------

    def start_bookie(self, bookie: BookieProcess, *, wait: bool = True, timeout_s: float = 0.0) -> bool:
        """Start with a deadline (``timeout_s``, 0: the run's ``start_timeout_s``; the launcher kills a
        bookie that prints no address in time); ``wait=False`` only spawns it: :meth:`start_bookie` again waits."""
        # Every bookie runs on the disk-full layer, with room to spare until filled (but the
        # one on a real small filesystem).
        capacity = None if bookie.capacity_file.exists() or self.on_small_fs(bookie) else ROOMY_DISK
        env = None if self.clocks is None else self.clocks.env(bookie.bookie_id)
        try:
            if not bookie.running:
                bookie.spawn(*self.cluster.bookie_args, powerloss=True, disk_capacity=capacity, env=env)
            if wait:
                bookie.wait_started(timeout_s or self.config.start_timeout_s)
        except Exception as e:  # noqa: BLE001 - handed to the run's report as a failure
            self.fail(f"{bookie.bookie_id} did not start: {e}")
            return False
        return True

    def bookie_info(self, bookie: BookieProcess) -> dict[str, Any]:
        from bkframe.client.bookies.connection import connect_bookie

        async def ask() -> dict[str, Any]:
            host, _, port = bookie.address.rpartition(":")
            with trio.fail_after(10):
                async with connect_bookie(host, int(port)) as conn:
                    return await conn.info()

        return trio.run(ask)

    def wait_out_of_limbo(self, bookie: BookieProcess) -> bool:
        """Wait until the bookie has repaired every limbo ledger; False (and a failure) if
        it does not in LIMBO_TIMEOUT_S plus LIMBO_S_PER_LEDGER per ledger it had in limbo."""
        started = time.monotonic()
        timeout = LIMBO_TIMEOUT_S
        info: dict[str, Any] = {}
        while time.monotonic() < started + timeout:
            self.supervise()
            if not bookie.running:
                self.fail(f"{bookie.bookie_id} exited while repairing its limbo ledgers; log tail: {log_tail(bookie)}")
                return False
            try:
                info = self.bookie_info(bookie)
                if not info["limbo_ledgers"]:
                    return True
                # Repair is one ledger at a time: a cluster with many ledgers takes longer.
                timeout = max(timeout, LIMBO_TIMEOUT_S + LIMBO_S_PER_LEDGER * len(info["limbo_ledgers"]))
            except (OSError, trio.TooSlowError) as e:
                info = {"error": repr(e)}
            time.sleep(0.5)
        self.fail(
            f"{bookie.bookie_id} still had ledgers {info.get('limbo_ledgers')} in limbo {timeout:.0f} s after its "
            f"restart (repair status: {info.get('repair', info.get('error'))})"
        )
        return False

    def hang(self, bookie: BookieProcess) -> None:
        assert bookie.proc is not None
        bookie.proc.send_signal(signal.SIGSTOP)

    def resume(self, bookie: BookieProcess) -> None:
        assert bookie.proc is not None
        bookie.proc.send_signal(signal.SIGCONT)

    def fill_disk(self, bookie: BookieProcess) -> None:
        """DISK FULL (bkframe.testing.faults.filling_disk): the disk shrinks to what the bookie uses, so
        every write that grows a file fails with ENOSPC and the disk check sees 100 %: it
        turns read-only; PD writers change ensemble, VD and BYPASS writers fail and their
        ledgers are recovered. Healed ("disk_free") after RunConfig.disk_full_s; nothing
        acknowledged is lost, a refused add is not acknowledged."""
        if self.small_fs is not None and self.on_small_fs(bookie):
            self.small_fs.fill()  # someone else's file takes every free block
            return
        bookie.set_disk_capacity(used_bytes(bookie.data_dir))

    def free_disk(self, bookie: BookieProcess) -> None:
        if self.small_fs is not None and self.on_small_fs(bookie):
            self.small_fs.free()
            return
        bookie.set_disk_capacity(ROOMY_DISK)

    def on_small_fs(self, bookie: BookieProcess) -> bool:
        return self.small_fs is not None and bookie.data_dir.is_relative_to(self.small_fs.path)

    # -- workers -------------------------------------------------------------------------

    def spawn(
        self, role: str, name: str, slot: int, *extra: str, module: str = "tests.faults.worker", argv_role: str = ""
    ) -> WorkerProc:
        """Start a worker process (``argv_role``: its role on its command line, if not ``role``)."""
        cfg = self.config
        log_path = self.logs_dir / f"{name}.log"
        cmd = [
            sys.executable, "-m", module, argv_role or role,
            "--metadata", self.cluster.metadata,
            "--name", name,
            "--records", str(self.records_dir / f"{name}.jsonl"),
            "--seed", str(cfg.seed),
            "--call-timeout", str(cfg.call_timeout_s),
            *extra,
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        if self.network is not None:
            cmd = self.network.command(role, slot, cmd)
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        worker = WorkerProc(role, name, slot, proc, log_path)
        self.workers.append(worker)
        return worker

    def spawn_writer(self, slot: int) -> WorkerProc:
        gen = self.generation[f"w{slot}"]
        self.generation[f"w{slot}"] += 1
        name = f"w{slot}" if gen == 0 else f"w{slot}g{gen}"
        menu = ",".join(f"{k}:{e}:{w}:{a}" for k, e, w, a in self.config.ledgers)
        return self.spawn(
            "writer", name, slot, "--stop-file", str(self.stop_dir / name), "--menu", menu,
            "--give-up", str(RECOVER_GIVE_UP_S),
            # Written once only from large_entry_bytes up: most ledgers big then.
            "--big-fraction", "0.6" if self.config.large_entry_bytes else "0.1", *self.config.writer_args,
        )

    def spawn_reader(self, slot: int) -> WorkerProc:
        gen = self.generation[f"r{slot}"]
        self.generation[f"r{slot}"] += 1
        name = f"r{slot}" if gen == 0 else f"r{slot}g{gen}"
        return self.spawn("reader", name, slot, "--stop-file", str(self.stop_dir / name))

    def spawn_recovery(self, ledger: int) -> WorkerProc:
        self.recoveries += 1
        return self.spawn(
            "recover", f"rec{self.recoveries}-L{ledger}", -1,
            "--ledger", str(ledger), "--give-up", str(RECOVER_GIVE_UP_S),
        )

    def heal_on_time(self, step: Step, heal: Callable[[], None]) -> None:
        """Run ``heal`` at the time of ``step``'s heal in the schedule, from a timer thread:
        the heal step itself may come late, as the loop runs its steps one by one and one may
        block for long (a bookie's start waits for the metadata store), while a process
        stopped inside a write transaction of the sqlite store keeps the store locked for
        every process. Seed 10 with 60 faults and --subscriptions stretched the hangs of a
        bookie just restarted and of a consumer (planned 7.5 s and 4.6 s) to 92 s that way:
        the restarting bookies could not open the store (each start failing only after its
        busy timeout, the loop waiting), writers hung in create_ledger. The heal step still
        runs (again: harmless) and counts."""
        heal_at = next(s.at_s for s in self.steps if s.fault_id == step.fault_id and not s.is_fault)
        timer = threading.Timer(max(0.0, self.t0 + heal_at - time.monotonic()), heal)
        timer.daemon = True
        timer.start()
        self.heal_timers[step.fault_id] = timer

    def cancel_heal_timer(self, step: Step) -> None:
        timer = self.heal_timers.pop(step.fault_id, None)
        if timer is not None:
            timer.cancel()

    def live_worker(self, role: str, slot: int) -> WorkerProc | None:
        for w in reversed(self.workers):
            if w.role == role and w.slot == slot and w.proc.poll() is None and not w.stopping:
                return w
        return None

    def open_ledgers_of(self, writer: WorkerProc) -> list[int]:
        """Ledgers the writer created and neither closed nor saw fail, from its records."""
        state: dict[int, bool] = {}
        for r in read_record_file(self.records_dir / f"{writer.name}.jsonl"):
            if r["ev"] == "created":
                state[r["ledger"]] = True
            elif r["ev"] in ("closed", "writer-failed"):
                state[r["ledger"]] = False
        return [ledger for ledger, is_open in state.items() if is_open]

    def unfinished_ledgers_of(self, writer: WorkerProc) -> list[int]:
        """Ledgers of a writer that is gone which it neither closed nor recovered (open ones,
        and failed ones whose background recovery died with it), with any it created but
        died before recording (found in the metadata store by their custom tag)."""
        state: dict[int, bool] = {}
        for r in read_record_file(self.records_dir / f"{writer.name}.jsonl"):
            if r["ev"] == "created":
                state[r["ledger"]] = True
            elif r["ev"] in ("closed", "recovered"):
                state[r["ledger"]] = False
        unrecorded = self.open_ledgers_tagged(writer.name, after=max(state, default=-1))
        return [ledger for ledger, unfinished in state.items() if unfinished] + unrecorded

    def open_ledgers_tagged(self, writer_name: str, after: int) -> list[int]:
        """:func:`open_ledgers_tagged` through a client of its own."""

        async def find() -> list[int]:
            async with bkframe.open_client(self.cluster.metadata) as client:
                with trio.fail_after(self.config.call_timeout_s):
                    return await open_ledgers_tagged(client, writer_name, after)

        try:
            return trio.run(find)
        except (bkframe.BKError, trio.TooSlowError) as e:
            self.fail(f"could not list the ledgers {writer_name} may have left open: {e!r}")
            return []

    def supervise(self) -> None:
        """Restart bookies and replace workers that exited on their own (a crash, a hang)."""
        for i, bookie in enumerate(self.cluster.bookies):
            if self.expected_up[i] and bookie.proc is not None and bookie.proc.poll() is not None:
                self.fail(
                    f"{bookie.bookie_id} exited by itself with status {bookie.proc.returncode}; log tail: "
                    f"{log_tail(bookie)}"
                )
                if not self.start_bookie(bookie):
                    self.expected_up[i] = False
        for w in list(self.workers):
            code = w.proc.poll()
            if code is None or w.stopping or w.role == "recover" or id(w) in self.handled:
                continue
            self.handled.add(id(w))
            if code == HUNG_EXIT:
                pass  # the worker recorded what hung; the checks report it
            else:
                self.fail(f"{w.role} {w.name} exited with status {code}; log tail: {file_tail(w.log_path)}")
            if w.role == "writer":
                for ledger in self.unfinished_ledgers_of(w):
                    self.spawn_recovery(ledger)
                self.spawn_writer(w.slot)
            elif w.role == "reader":
                self.spawn_reader(w.slot)
            elif w.role == "producer":
                self.spawn_producer()
            elif w.role == "consumer":
                self.spawn_consumer(w.slot)
            elif w.role.startswith("table-"):
                self.spawn_table_worker(w.role.removeprefix("table-"))

    # -- the run -------------------------------------------------------------------------

    def fail(self, message: str) -> None:
        self.report.failures.append(message)

    def execute(self, step: Step) -> None:
        action = step.action
        if action in ("writer_death", "recover_while_writing"):
            writer = self.live_worker("writer", step.target)
            if writer is None:
                return
            if action == "writer_death":
                writer.proc.kill()
                writer.proc.wait(timeout=30)
                writer.stopping = True  # it is gone on purpose: supervise() leaves it
                for ledger in self.unfinished_ledgers_of(writer):
                    self.spawn_recovery(ledger)
                self.spawn_writer(step.target)
            else:
                # Between two ledgers (or just restarted) the writer has none open: wait a little.
                ledgers = self.open_ledgers_of(writer)
                until = time.monotonic() + 5.0
                while not ledgers and time.monotonic() < until and writer.proc.poll() is None:
                    time.sleep(0.1)
                    ledgers = self.open_ledgers_of(writer)
                if not ledgers:
                    return
                self.spawn_recovery(ledgers[-1])
            self.report.done[action] += 1
            return
        if action in CONSUMER_ACTIONS:
            self.execute_consumer(step)
            return
        if action in COMPACTOR_ACTIONS:
            self.execute_compactor(step)
            return
        if action in NETWORK_ACTIONS:
            assert self.network is not None, "network faults are drawn only for partition runs"
            try:
                self.network.execute(step)
            except FaultNetworkError as e:
                self.fail(f"schedule step {step.describe()}: {e}")
                return
            # An isolated bookie runs on but answers nobody; a cut one still answers the others.
            if action in ("isolate", "reconnect"):
                self.expected_up[step.target] = action == "reconnect"
            self.report.done[action] += 1
            return
        bookie = self.cluster.bookies[step.target]
        if action in ("kill", "power_cut", "hang", "disk_full", "clock") and not bookie.running:
            self.fail(f"schedule step {step.describe()}: {bookie.bookie_id} is not running (it did not start earlier)")
            self.skipped.add(step.fault_id)
            return
        if step.fault_id in self.skipped:
            return  # the heal of a fault that was not injected
        if action in ("kill", "power_cut") and self.config.has_bypass and self.no_more_unclean:
            self.report.done[f"skipped {action}"] += 1
            self.skipped.add(step.fault_id)
            return
        if action in CLOCK_ACTIONS:
            assert self.clocks is not None, "clock faults are drawn only when their weight is > 0"
            self.clocks.execute(step, bookie.bookie_id)  # the bookie serves on: still expected up
            self.report.done[action] += 1
            return
        if action == "kill":
            bookie.kill()
        elif action == "power_cut":
            bookie.lose_power()
        elif action == "hang":
            self.hang(bookie)
            self.heal_on_time(step, lambda: resume_worker(bookie))
        elif action == "disk_full":
            self.fill_disk(bookie)
        elif action == "resume":
            self.cancel_heal_timer(step)
            self.resume(bookie)
        elif action == "disk_free":
            self.free_disk(bookie)
        elif action == "restart":
            if not self.start_bookie(bookie):
                return
            if step.wait_limbo and not self.wait_out_of_limbo(bookie):
                # Another unclean restart now could put a second bookie of one ensemble in
                # limbo, which BP-46 lets stall for good: the failure above is the finding.
                self.no_more_unclean = f"{bookie.bookie_id} did not leave limbo"
        else:
            raise AssertionError(f"unknown action {action}")
        self.expected_up[step.target] = action in ("restart", "resume", "disk_free")
        self.report.done[action] += 1

    def sleep_until(self, t0: float, at_s: float) -> None:
        while (left := t0 + at_s - time.monotonic()) > 0:
            self.supervise()
            time.sleep(min(0.25, left))

    def run(self) -> RunReport:
        cfg = self.config
        started = time.monotonic()
        (self.workdir / "schedule.txt").write_text(
            f"{cfg}\n" + "\n".join(s.describe() for s in self.steps) + "\n"
        )
        phase_start = started

        def phase(name: str) -> None:
            nonlocal phase_start
            now = time.monotonic()
            self.report.phases[name] = now - phase_start
            phase_start = now

        try:
            # All at once, then each waited for (sharing the machine: twice the deadline).
            if not all([self.start_bookie(b, wait=False) for b in self.cluster.bookies]):
                return self.report
            for bookie in self.cluster.bookies:
                if not self.start_bookie(bookie, timeout_s=2 * self.config.start_timeout_s):
                    return self.report
            for slot in range(cfg.writers):
                self.spawn_writer(slot)
            for slot in range(cfg.readers):
                self.spawn_reader(slot)
            if cfg.subscriptions:
                self.start_subscriptions()
            if cfg.compaction:
                self.start_compaction()
            self.start_extra()
            phase("start")
            t0 = self.t0 = time.monotonic()
            for step in self.steps:
                self.sleep_until(t0, step.at_s)
                lag = time.monotonic() - t0 - step.at_s
                if lag > cfg.max_lag_s:
                    self.fail(
                        f"the schedule fell {lag:.0f} s behind by step {step.describe()!r} (earlier steps took that "
                        f"long, see above); the rest of the schedule is skipped"
                    )
                    break
                self.execute(step)
            last = self.steps[-1].at_s if self.steps else 0.0
            self.sleep_until(t0, last + cfg.cooldown_s)
            phase("schedule")
            self.heal_all()
            phase("heal")
            self.before_stop()
            self.stop_workers()
            phase("stop")
            if cfg.subscriptions:
                # Before the ledger checks, which then run on a quiet cluster: the drain
                # closes the log's last segment, and its owner is gone (an owner deletes
                # state ledgers as it snapshots).
                self.drain()
                phase("drain")
            if cfg.compaction:
                self.finish_compaction()
                phase("compaction")
            records = list(read_records(self.records_dir))
            self.report.check = trio.run(check_cluster, self.cluster, records, cfg.call_timeout_s)
            if cfg.subscriptions:
                check_subscriptions(records, self.report.check, cfg.sub_lease_s)
            if self.table_state is not None:
                check_compaction(records, *self.table_state, self.report.check)
            self.extra_checks(self.report.check)
            phase("checks")
            self.collect_log_errors()
        finally:
            self.report.seconds = time.monotonic() - started
            for timer in self.heal_timers.values():
                timer.cancel()
            for w in self.workers:
                if w.proc.poll() is None:
                    w.proc.kill()
                    w.proc.wait(timeout=30)
            for bookie in self.cluster.bookies:
                if bookie.proc is not None and bookie.proc.poll() is None:
                    self.resume(bookie)  # a stopped process cannot die before it runs
            self.cluster.close()
            if self.network is not None:
                self.network.close()
            if self.small_fs is not None:
                self.small_fs.unmount()
            (self.workdir / "report.txt").write_text(
                self.report.summary() + "\n\nall failures:\n" + "\n".join(self.report.all_failures) + "\n"
            )
        return self.report

    # Hooks of a longer run (tests/soak): more workers, a wait before they stop, more checks.
    def start_extra(self) -> None: ...
    def before_stop(self) -> None: ...
    def extra_checks(self, result: CheckResult) -> None: ...

    def heal_all(self) -> None:
        """After the schedule: every bookie running and reachable (none should be down, but be
        sure), and no consumer stopped."""
        self.resume_consumers()
        if self.network is not None:
            try:
                self.network.heal_all()
            except FaultNetworkError as e:
                self.fail(str(e))
            self.report.network = self.network.summary()
        for bookie in self.cluster.bookies:
            if bookie.proc is not None and bookie.proc.poll() is None:
                self.resume(bookie)
            elif not bookie.running:
                self.fail(f"{bookie.bookie_id} was not running after the schedule; restarting it")
                self.start_bookie(bookie)
        for bookie in self.cluster.bookies:
            if bookie.running:
                self.wait_out_of_limbo(bookie)

    def stop_workers(self) -> None:
        cfg = self.config
        for w in self.workers:
            if w.role != "recover" and w.proc.poll() is None:
                (self.stop_dir / w.name).touch()
        # A writer closes its ledger, waits for its failed ones' recoveries and exits.
        stop_budget = cfg.call_timeout_s * 2 + RECOVER_GIVE_UP_S + 30
        for w in self.workers:
            budget = RECOVER_GIVE_UP_S + cfg.call_timeout_s * 3 + 30 if w.role == "recover" else stop_budget
            try:
                code = w.proc.wait(timeout=budget)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait(timeout=30)
                self.fail(f"{w.role} {w.name} did not stop within {budget:.0f} s; log tail: {file_tail(w.log_path)}")
                continue
            if code not in (0, HUNG_EXIT, GAVE_UP_EXIT, -signal.SIGKILL) and id(w) not in self.handled:
                self.fail(f"{w.role} {w.name} exited with status {code}; log tail: {file_tail(w.log_path)}")
            w.stopping = True

    def collect_log_errors(self) -> None:
        """Tracebacks in bookie logs: noted, not failures (a bookie that crashed is one,
        through supervise()); issue 10 lists "peer resets log tracebacks" separately."""
        for bookie in self.cluster.bookies:
            text = bookie.log()
            count = text.count("Traceback")
            if count:
                at = text.index("Traceback")
                excerpt = text[max(0, at - 200) : at + 800]
                self.report.notes.append(
                    f"{bookie.bookie_id} logged {count} traceback(s) ({bookie.log_path}); the first:\n{excerpt}"
                )


def log_tail(bookie: BookieProcess) -> str:
    return bookie.log()[-1500:]


def run_faults(config: RunConfig, workdir: Path, reproduce: str = "") -> RunReport:
    """One seeded run; the report says what was done and every failure found.

    With ``BKFRAME_FAULTS_KEEP=DIR`` in the environment, a failed run's records, logs,
    schedule and report (not the bookies' data) are copied to ``DIR/seed-S-<time>``:
    pytest keeps only its last few temp dirs, and the evidence should outlive them.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    run = Run(config, workdir)
    run.report.reproduce = reproduce
    report = run.run()
    (workdir / "report.json").write_text(
        json.dumps({"seed": config.seed, "ok": report.ok, "failures": report.all_failures, "done": report.done})
    )
    keep = os.environ.get(KEEP_ENV)
    if keep and not report.ok:
        target = Path(keep) / f"seed-{config.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        def data_dirs(parent: str, names: list[str]) -> list[str]:
            return [n for n in names if n.startswith("bookie-") and (Path(parent) / n).is_dir()]

        shutil.copytree(workdir, target, ignore=data_dirs)
        report.workdir = target
    return report
