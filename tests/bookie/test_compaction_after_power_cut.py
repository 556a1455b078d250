"""Compaction after a power cut, on a real bookie process with the power-loss layer: the
index reached the disk but the entry-log pages it points to did not. Garbage collection's
compaction used to fail on those entries ("read of N bytes at offset M got only 0") and
take the bookie down at every GC, after every restart. Now they are missing entries: the
bookie stays up, and index and logs agree after its first checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

import bkframe
from bkframe.core.ledger_keys import master_key
from bkframe.plugins.ledger_storage_default.ledger_index import HEADER_SIZE, RECORD_DTYPE
from bkframe.proto.codes import Status
from bkframe.testing.faults import write_faults
from bkframe.testing.kit import PASSWORD, wait_until

CONFIG = """
[bookie]
checkpoint_interval_s = 0.3
gc_interval_s = 0.5

[journal]
plugin = "journal_fs"
preallocate_bytes = 0

[entry_log_manager]
plugin = "single"
max_log_size = 4194304
"""


def records_past_log_end(data_dir: Path) -> dict[int, list[int]]:
    """Per ledger, the entry ids whose index record (as on disk) points past the end of
    its entry log, or into a log that is not there."""
    sizes = {int(log.stem, 16): log.stat().st_size for log in (data_dir / "entrylogs").glob("*.log")}
    out: dict[int, list[int]] = {}
    for index in (data_dir / "ledgers" / "index").glob("*.idx"):
        raw = index.read_bytes()
        usable = (len(raw) - HEADER_SIZE) // RECORD_DTYPE.itemsize * RECORD_DTYPE.itemsize
        records = np.frombuffer(raw, dtype=RECORD_DTYPE, count=usable // RECORD_DTYPE.itemsize, offset=HEADER_SIZE)
        held = np.flatnonzero(records["length"])
        past = [
            int(e)
            for e in held
            if int(records[e]["offset"]) + int(records[e]["length"]) > sizes.get(int(records[e]["log_id"]), 0)
        ]
        if past:
            out[int(index.stem, 16)] = past
    return out


async def counter_above(conn: Any, counter: str, above: int, timeout: float = 60.0) -> dict[str, Any]:
    """The bookie's info once its ``counter`` is above ``above``."""

    async def passed() -> dict[str, Any] | None:
        info = await conn.info()
        return info if info["counters"][counter] > above else None

    return await wait_until(passed, f"the bookie's {counter} above {above}", timeout, every_s=0.1)


async def gc_passes(client: Any, conn: Any, n: int = 2) -> None:
    """Until ``n`` more garbage collections have run whole (compaction included): each
    deletes a marker ledger made for it, and one pass runs at a time, so the pass that
    collects the last marker began after the one before it had ended."""
    for _ in range(n):
        before = (await conn.info())["counters"]["gc_ledgers_deleted"]
        marker = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
        await marker.append(b"marker")
        await marker.close()
        await client.delete_ledger(marker.ledger_id)
        await counter_above(conn, "gc_ledgers_deleted", before)


async def connection(client: Any, bookie_id: str, timeout: float = 60.0) -> Any:
    """A working connection to the bookie (after a restart the pool may first hand out the
    old one, to the dead process)."""
    with trio.fail_after(timeout):
        while True:
            try:
                conn = await client.pool.get(bookie_id)
                await conn.info()
                return conn
            except ConnectionError:
                await trio.sleep(0.2)


#: Not bkframe.testing.kit.payload: a few hundred bytes each, so a few entries fill an entry log.
def payload(ledger: int, entry: int) -> bytes:
    return b"%d:%d|" % (ledger, entry) * 60


async def test_compaction_after_a_power_cut_keeps_the_bookie_up(
    cluster_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = tmp_path / "faults"
    control.mkdir()
    monkeypatch.setenv(write_faults.CONTROL_ENV, str(control))
    cluster = cluster_factory(1, config=CONFIG, powerloss=True)
    (b,) = cluster.bookies
    async with bkframe.open_client(cluster.metadata) as client:
        # A big ledger that will be deleted (so its entry log is worth compacting) and a
        # BYPASS_JOURNAL one that is kept; their entries share entry log 0.
        doomed = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
        kept = await client.create_ledger(
            ensemble=1, write_quorum=1, ack_quorum=1, ledger_type="BYPASS_JOURNAL", password=PASSWORD
        )
        for e in range(300):
            await doomed.append(b"d" * 2000)
            if e % 15 == 0:
                await kept.append(payload(kept.ledger_id, e // 15))
        conn = await connection(client, b.bookie_id)
        info = await counter_above(conn, "checkpoints", (await conn.info())["counters"]["checkpoints"] + 1)
        # From now on the disk loses what it is told to flush to entry logs (a volatile
        # write cache), while index syncs reach it: the index gets ahead of the log.
        (control / write_faults.DROP_SYNC_FILE).write_text(f"{b.data_dir}/entrylogs/")
        for e in range(20, 40):
            await kept.append(payload(kept.ledger_id, e))
        await counter_above(conn, "checkpoints", info["counters"]["checkpoints"] + 2)
        b.lose_power()
        (control / write_faults.DROP_SYNC_FILE).unlink()
        # The scenario: after the power cut the index points past the log's end.
        assert records_past_log_end(b.data_dir) == {kept.ledger_id: list(range(20, 40))}
        b.start(*cluster.bookie_args, powerloss=True)
        # The doomed ledger goes; GC compacts entry log 0 around the lost entries.
        await client.delete_ledger(doomed.ledger_id)
        conn = await connection(client, b.bookie_id)
        info = await counter_above(conn, "gc_bytes_freed", 0)
        await gc_passes(client, conn)  # a few more collections
        assert b.running, b.log()[-3000:]
        info = await conn.info()
        assert info["counters"]["storage_entries_dropped"] == 20
        # What survived reads back; what the power cut took is missing -- in limbo after
        # the unclean shutdown (BP-46), so UNKNOWN, not an I/O error nor a false "no entry".
        for e in range(20):
            r = await conn.read(kept.ledger_id, e, master_key=master_key(PASSWORD))
            assert (r.status, r.data[-len(payload(kept.ledger_id, e)) :]) == (Status.OK, payload(kept.ledger_id, e))
        for e in range(20, 40):
            assert (await conn.read(kept.ledger_id, e, master_key=master_key(PASSWORD))).status == Status.UNKNOWN
        # Converged: after the bookie's checkpoints, what is on disk agrees -- another power
        # cut leaves no index record past its log, and the bookie starts and stays up.
        await counter_above(conn, "checkpoints", info["counters"]["checkpoints"])
        b.lose_power()
        assert records_past_log_end(b.data_dir) == {}
        b.start(*cluster.bookie_args, powerloss=True)
        conn = await connection(client, b.bookie_id)
        await gc_passes(client, conn)
        assert b.running, b.log()[-3000:]
        assert (await conn.info())["counters"]["storage_entries_dropped"] == 0
        assert (await conn.read(kept.ledger_id, 19, master_key=master_key(PASSWORD))).status == Status.OK
