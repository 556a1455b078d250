"""A subscription run's workload (RunConfig.subscriptions): its log and key_shared
subscription, a producer and consumers (sub_worker.py), the consumer faults, and the drain
that empties the subscription before the checks (sub_checks.py). A part of the harness's
:class:`~tests.faults.harness.Run`, kept apart as one concept."""

from __future__ import annotations

import signal
import subprocess
from typing import TYPE_CHECKING

import trio

import bkframe
from tests.faults.procs import WorkerProc, file_tail, resume_worker
from tests.faults.schedule import Step
from tests.faults.worker import HUNG_EXIT

if TYPE_CHECKING:
    from tests.faults.harness import Run

#: Subscription runs: the log, its key_shared subscription and how its records roll over
#: (small segments: the owner follows the log across several rollovers in a short run).
SUB_LOG = "subjobs"
SUB_NAME = "workers"
SUB_ROLLOVER_ENTRIES = 100
SUB_MODULE = "tests.faults.sub_worker"
#: The drain gives up on emptying the subscription after this long (it records how long it took).
DRAIN_S = 90.0


class SubscriptionWorkload:
    """The subscription part of a run (mixed into :class:`~tests.faults.harness.Run`)."""

    def start_subscriptions(self: Run) -> None:
        """The log and its subscription exist before any of its workers starts: a consumer
        never waits for them, and the subscription sees the log from its first record."""
        cfg = self.config

        async def create() -> None:
            async with bkframe.open_client(self.cluster.metadata) as client:
                with trio.fail_after(cfg.call_timeout_s):
                    await client.logs.create(SUB_LOG, rollover_entries=SUB_ROLLOVER_ENTRIES)
                    await client.logs.create_subscription(SUB_LOG, SUB_NAME, kind="key_shared", lease_s=cfg.sub_lease_s,
                                                          state_ledger_type=cfg.sub_state_ledger_type)

        trio.run(create)
        self.spawn_producer()
        for slot in range(cfg.consumers):
            self.spawn_consumer(slot)

    def spawn_sub_worker(self: Run, role: str, prefix: str, slot: int, *extra: str) -> WorkerProc:
        gen = self.generation[f"{prefix}{slot}"]
        self.generation[f"{prefix}{slot}"] += 1
        name = f"{prefix}{slot}" + (f"g{gen}" if gen else "")
        return self.spawn(
            role, name, slot, "--stop-file", str(self.stop_dir / name), "--log", SUB_LOG, "--sub", SUB_NAME, *extra,
            module=SUB_MODULE,
        )

    def spawn_producer(self: Run) -> WorkerProc:
        return self.spawn_sub_worker("producer", "p", 0)

    def spawn_consumer(self: Run, slot: int) -> WorkerProc:
        # Every other slot groups its acks: a kill then loses acks not sent yet.
        return self.spawn_sub_worker("consumer", "c", slot, *(["--group-acks"] if slot % 2 else []))

    def execute_consumer(self: Run, step: Step) -> None:
        """kill -9 a consumer (and start another in its slot), or hang it (SIGSTOP) or resume it."""
        assert self.harness_records is not None, "consumer faults are drawn only in subscription runs"
        if step.action == "consumer_resume":
            hung = self.hung_consumers.pop(step.target, None)
            if hung is None:
                return  # its hang was not injected
            self.cancel_heal_timer(step)
            resume_worker(hung)  # again, if the timer did: harmless
            self.report.done[step.action] += 1
            return
        consumer = self.live_worker("consumer", step.target)
        if consumer is None:
            self.skipped.add(step.fault_id)
            return
        if step.action == "consumer_kill":
            # Written before the kill: the checks take it as a moment the consumer surely
            # still held its leases (an owner may end them from its death on), so it must
            # not come after the real death.
            self.harness_records.write("sub-killed", consumer=consumer.name)
            consumer.proc.kill()
            consumer.proc.wait(timeout=30)
            consumer.stopping = True  # gone on purpose: supervise() leaves it
            self.spawn_consumer(step.target)
        else:
            consumer.proc.send_signal(signal.SIGSTOP)
            self.heal_on_time(step, lambda: resume_worker(consumer))
            self.hung_consumers[step.target] = consumer
        self.report.done[step.action] += 1

    def resume_consumers(self: Run) -> None:
        for consumer in self.hung_consumers.values():
            resume_worker(consumer)
        self.hung_consumers.clear()

    def drain(self: Run) -> None:
        """Every other worker stopped: a fresh consumer empties the subscription (sub_worker.py's
        ``drain``), recording what it receives like the others."""
        cfg = self.config
        drain = self.spawn(
            "drain", "drain", -1, "--log", SUB_LOG, "--sub", SUB_NAME, "--drain-s", str(DRAIN_S), module=SUB_MODULE
        )
        drain.stopping = True  # waited for here, not supervised
        budget = DRAIN_S + 2 * cfg.call_timeout_s + 30
        try:
            code = drain.proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            drain.proc.kill()
            drain.proc.wait(timeout=30)
            self.fail(f"the drain of subscription {SUB_LOG}/{SUB_NAME} did not end within {budget:.0f} s; log tail: "
                      f"{file_tail(drain.log_path)}")
            return
        if code not in (0, HUNG_EXIT):  # HUNG_EXIT: recorded (sub-drain-stuck or hung), the checks say it
            self.fail(f"the drain exited with status {code}; log tail: {file_tail(drain.log_path)}")
