"""Background tasks (checkpoints, garbage collection) that fail are logged and retried with
backoff; they never take the bookie down. On real bookie processes where it matters."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from bkframe import LedgerMetadata
from bkframe.bookie.runtime.periodic import run_periodically
from bkframe.client.bookies.connection import BookieClient, connect_bookie
from bkframe.core.counters import Counters
from bkframe.core.ledger_keys import key_hash
from bkframe.core.plugin_manager import PluginManager
from bkframe.plugins.entry_log_single import SingleEntryLogManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage
from bkframe.proto.codes import Status
from bkframe.testing.cluster import BookieProcess
from bkframe.testing.faults import write_faults
from bkframe.testing.kit import wait_until

KEY = b"k"


def test_run_periodically_backs_off_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)
    calls: list[float] = []

    async def step() -> None:
        calls.append(trio.current_time())
        if 2 <= len(calls) <= 5:
            raise RuntimeError(f"failure {len(calls) - 1}")

    async def main() -> None:
        with trio.move_on_after(100):
            await run_periodically("test step", 10.0, step, first_retry_s=1.0)

    with caplog.at_level(logging.WARNING, logger="bkframe.background"):
        trio.run(main, clock=clock)
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(calls)]
    # Every 10 s; after failures 1, 2, 3, 4 the retries come after 1, 2, 4, 8 s; then 10 s again.
    assert gaps[:6] == [10.0, 1.0, 2.0, 4.0, 8.0, 10.0]
    text = caplog.text
    assert "test step failed; retrying in 1.0 s" in text and "RuntimeError: failure 1" in text
    assert "failed again (4 times in a row): failure 4" in text
    assert "succeeded again after 4 failure(s)" in text


#: The bookie leaves read-only mode once its disk check finds usage below ``disk_usage_lwm``.
#: These tests fill no real disk (they inject ENOSPC), so the thresholds are set where the
#: machine's own disk usage (a CI disk may be over 90% used) cannot keep the bookie read-only.
REAL_DISK_ANY_USAGE = "disk_usage_threshold = 1.0\ndisk_usage_lwm = 0.999\n"


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bookie.toml"
    path.write_text(text)
    return path


async def test_a_ledger_id_no_metadata_store_can_hold_does_not_kill_the_bookie(
    tmp_path: Path, bookie_processes: list[BookieProcess]
) -> None:
    """A bookie that stored an ADD for ledger 2^63 before ids were checked died at every
    garbage collection, after every restart (sqlite: OverflowError). Now it starts, stays
    up, and its garbage collection drops that ledger (no store can hold it)."""
    data_dir = tmp_path / "bookie"
    counters = Counters()
    storage = DefaultLedgerStorage(
        data_dir / "ledgers", SingleEntryLogManager(data_dir / "entrylogs", counters), counters
    )
    for ledger in (2**63, 2**64 - 1):
        storage.ensure_ledger(ledger, KEY, 0)
        storage.add_entries(ledger, [0], [b"from a bogus request"])
    await storage.aclose()
    config = _config(tmp_path, "[bookie]\ngc_interval_s = 0.2\n")
    metadata = f"sqlite://{tmp_path / 'md.db'}"
    b = BookieProcess(data_dir).start("--config", str(config), "--metadata", metadata)
    bookie_processes.append(b)
    with trio.fail_after(30):
        while True:
            assert b.proc.poll() is None, b.log_path.read_text()[-3000:]
            async with connect_bookie(b.host, b.port) as bk:
                info = await bk.info()
            if info["counters"]["gc_ledgers_deleted"] == 2:
                break
            await trio.sleep(0.2)
    assert info["ledgers"] == 0
    # More collections: each of two marker ledgers is collected by a pass of its own.
    async with connect_bookie(b.host, b.port) as bk:
        for marker in (10, 11):
            await collect_a_marker(bk, metadata, marker)
    assert b.proc.poll() is None
    assert b.stop() == 0


async def test_a_failing_checkpoint_is_retried_and_loses_nothing(
    tmp_path: Path, bookie_processes: list[BookieProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LastLogMark cannot be written (a full disk: a short write, then ENOSPC): the
    checkpoint fails, the bookie keeps serving, and checkpoints resume once there is space."""
    control = tmp_path / "faults"
    control.mkdir()
    monkeypatch.setenv(write_faults.CONTROL_ENV, str(control))
    data_dir = tmp_path / "bookie"
    config = _config(tmp_path, "[bookie]\ncheckpoint_interval_s = 0.2\ndisk_check_interval_s = 0.2\n" + REAL_DISK_ANY_USAGE)
    b = BookieProcess(data_dir).start("--config", str(config))
    bookie_processes.append(b)
    payloads = {e: b"entry %d " % e * 50 for e in range(60)}
    finished = False
    async with connect_bookie(b.host, b.port) as bk:
        for e in range(30):
            assert (await bk.add(1, e, payloads[e], master_key=KEY)).status == Status.OK
        (control / write_faults.ENOSPC_FILE).write_text("lastmark")
        await wait_until(lambda: failed_checkpoints(b) >= 3, "three failed checkpoints", 30)
        assert b.proc.poll() is None, b.log_path.read_text()[-3000:]
        stuck = (await bk.info())["counters"]["checkpoints"]
        # Two more tries, both failed: neither counted as a checkpoint.
        failed = failed_checkpoints(b)
        await wait_until(lambda: failed_checkpoints(b) >= failed + 2, "two more failed checkpoints", 30)
        assert (await bk.info())["counters"]["checkpoints"] == stuck
        (control / write_faults.ENOSPC_FILE).unlink()
        # A write that found no space made the bookie read-only (it may still be): it
        # takes adds again once its disk check sees space.
        with trio.fail_after(30):
            for e in range(30, 60):
                while (status := (await bk.add(1, e, payloads[e], master_key=KEY)).status) == Status.READ_ONLY:
                    await trio.sleep(0.1)
                assert status == Status.OK
        with trio.fail_after(30):  # the backoff is at most the interval
            while (await bk.info())["counters"]["checkpoints"] <= stuck:
                await trio.sleep(0.1)
        finished = True
    # (The block finished on one connection: the bookie did not die.)
    assert finished and b.proc.poll() is None, b.log_path.read_text()[-3000:]
    log = b.log_path.read_text()
    assert "no space to write the LastLogMark" in log and "No space left on device" in log
    # A crash now: the restart replays from an intact LastLogMark and has every entry.
    b.kill()
    b2 = BookieProcess(data_dir).start()
    bookie_processes.append(b2)
    read_back = {}
    async with connect_bookie(b2.host, b2.port) as bk:
        for e in payloads:
            r = await bk.read(1, e, master_key=KEY)
            read_back[e] = r.data if r.status == Status.OK else None
    assert read_back == payloads
    assert b2.stop() == 0


def failed_checkpoints(b: BookieProcess) -> int:
    """How many checkpoints the bookie logged it could not finish (no space for the mark)."""
    return b.log().count("no space to write the LastLogMark")


async def collect_a_marker(bk: BookieClient, metadata: str, ledger_id: int) -> None:
    """Make ``ledger_id`` in the store, add an entry to the bookie, delete the ledger from
    the store; until the bookie's garbage collection has deleted it: a pass that began
    after this call ran (one pass at a time, so the one before it ended)."""
    before = (await bk.info())["counters"]["gc_ledgers_deleted"]
    store = PluginManager().metadata_store(metadata)
    try:
        await store.create_ledger(
            LedgerMetadata(ledger_id, 1, 1, 1, ((0, ("b",)),), password_hash=key_hash(KEY))  # type: ignore[arg-type]
        )

        async def added() -> bool:  # TRY_AGAIN while the bookie checks the key with the store
            status = (await bk.add(ledger_id, 0, b"marker", master_key=KEY)).status
            assert status in (Status.OK, Status.TRY_AGAIN), status
            return status == Status.OK

        await wait_until(added, f"the marker ledger {ledger_id} to take its entry", 30)
        await store.delete_ledger(ledger_id)
    finally:
        await store.aclose()

    async def collected() -> bool:
        return (await bk.info())["counters"]["gc_ledgers_deleted"] > before

    await wait_until(collected, f"the garbage collection of marker ledger {ledger_id}", 30)
