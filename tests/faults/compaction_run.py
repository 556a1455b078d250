"""A compaction run's workload (RunConfig.compaction): a compacted log of keyed records, its
writer, a compactor the schedule kills (kill -9) and replaces (it offloads older segments
to a ``file://`` tier too), a reader of the log as a table (compaction_worker.py), and after
the run the settling, one more compaction with no fault and the reads the checks judge
(compaction_checks.py). A part of the harness's :class:`~tests.faults.harness.Run`, kept
apart as one concept."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import trio

import bkframe
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.testing.kit import wait_until
from tests.faults.compaction_checks import LogContents
from tests.faults.compaction_worker import LOCK_TTL_S
from tests.faults.procs import WorkerProc
from tests.faults.schedule import Step

if TYPE_CHECKING:
    from tests.faults.harness import Run

TABLE_LOG = "table"
TABLE_CURSOR = "table-reader"
#: Small segments: compactions have closed segments to rewrite within seconds.
TABLE_ROLLOVER_ENTRIES = 60
TABLE_MODULE = "tests.faults.compaction_worker"
#: Each worker role's name prefix (its process role is ``table-<role>``).
TABLE_PREFIX = {"writer": "tw", "reader": "tr", "compactor": "cp"}


class CompactionWorkload:
    """The compaction part of a run (mixed into :class:`~tests.faults.harness.Run`)."""

    #: After the run: the log's records, its table and what the final compaction left.
    table_state: tuple[LogContents, LogContents, list[str]] | None = None

    def start_compaction(self: Run) -> None:
        cfg = self.config

        async def create() -> None:
            async with bkframe.open_client(self.cluster.metadata) as client:
                with trio.fail_after(cfg.call_timeout_s):
                    # Tombstones may go as soon as the reader's cursor passed them.
                    await client.logs.create(
                        TABLE_LOG, rollover_entries=TABLE_ROLLOVER_ENTRIES, compaction="key", tombstone_retention_s=0,
                        offload_deletion_lag_s=0,
                    )
                    await client.logs.create_cursor(TABLE_LOG, TABLE_CURSOR)

        trio.run(create)
        for role in TABLE_PREFIX:
            self.spawn_table_worker(role)

    def spawn_table_worker(self: Run, role: str) -> WorkerProc:
        prefix = TABLE_PREFIX[role]
        gen = self.generation[prefix]
        self.generation[prefix] += 1
        name = prefix + (f"g{gen}" if gen else "")
        tier = self.workdir / "tier"
        tier.mkdir(exist_ok=True)
        extra = ("--tier", tier.as_uri()) if role == "compactor" else ()
        return self.spawn(
            f"table-{role}", name, 0, "--stop-file", str(self.stop_dir / name), "--log", TABLE_LOG, *extra,
            module=TABLE_MODULE, argv_role=role,
        )

    def execute_compactor(self: Run, step: Step) -> None:
        """kill -9 the compactor, wherever it is in a run, and start another."""
        compactor = self.live_worker("table-compactor", 0)
        if compactor is None:
            self.skipped.add(step.fault_id)
            return
        compactor.proc.kill()
        compactor.proc.wait(timeout=30)
        compactor.stopping = True  # gone on purpose: supervise() leaves it
        self.spawn_table_worker("compactor")
        self.report.done[step.action] += 1

    def finish_compaction(self: Run) -> None:
        """Every worker stopped: settle the log (its writer's last segment closed), compact it
        once more with no fault (replaced ledgers retired at once), then read it whole and as
        a table."""
        cfg = self.config

        async def finish() -> tuple[LogContents, LogContents, list[str]]:
            async with bkframe.open_client(self.cluster.metadata) as client:
                logs = client.logs
                with trio.fail_after(4 * cfg.call_timeout_s):
                    writer = await logs.open_writer(TABLE_LOG)
                    await writer.close()
                    # A compactor killed last may hold the log's lock until it expires.
                    await wait_until(
                        lambda: _free(client.metadata), f"the compaction lock of {TABLE_LOG} free", 3 * LOCK_TTL_S
                    )
                    # The offloaded segments' ledgers deleted (the log's deletion lag is 0), as
                    # the offload service does: the segments the run offloaded before they were
                    # compacted are then compacted in the tier, and the log holds each key once.
                    await _delete_offloaded_ledgers(client.metadata)
                    with tempfile.TemporaryDirectory() as work:
                        await logs.compact(TABLE_LOG, work_dir=Path(work), retire_lag_s=0)
                    record = await logs.metadata(TABLE_LOG)
                    leftovers = [f"staged ledger {s.ledger_id} ({s.token})" for s in record.staged]
                    leftovers += [f"garbage ledger {i}" for i in record.garbage]
                    reader = await logs.reader(TABLE_LOG)
                    end = await reader.end()
                    whole = {e.position: (e.key, e.payload) for e in await reader.read(end=end)}
                    table = {e.position: (e.key, e.payload) for e in await reader.read(end=end, compacted=True)}
                return whole, table, leftovers

        try:
            self.table_state = trio.run(finish)
        except Exception as e:  # noqa: BLE001 - the finding: reported, the other checks still run
            self.fail(f"the compacted log {TABLE_LOG} could not be settled, compacted and read after the run: {e!r}")


async def _free(store: MetadataStore) -> bool:
    return await store.lock_holder(f"compaction/{TABLE_LOG}") is None


async def _delete_offloaded_ledgers(store: MetadataStore) -> None:
    """One pass of the offload service, as the cluster's own: no segment is due (the log
    sets no offload policy), and the ledgers of offloaded segments go (no deletion lag)."""
    from bkframe.client.settings import ClientSettings
    from bkframe.common.cluster_record import require_cluster
    from bkframe.core.config import OffloadConfig
    from bkframe.core.plugin_manager import PluginManager
    from bkframe.tiering.offload_service import OffloadService

    settings = ClientSettings().as_internal((await require_cluster(store)).secret)
    service = OffloadService(store, PluginManager(), OffloadConfig(compaction=False), holder="harness", settings=settings)
    await service.run_once()
