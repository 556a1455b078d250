"""BP-46 on one bookie over a real socket: BYPASS_JOURNAL adds skip the journal; after an
unclean shutdown its ledgers are fenced and in limbo (UNKNOWN, never NO_ENTRY), and that
state survives another restart. (Repair from peers is tested on clusters.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bkframe.bookie import reads
from bkframe.bookie.durability.protection import protect
from bkframe.bookie.startup.cookies import UNCLEAN_MARKER
from bkframe.client.bookies.connection import connect_bookie
from bkframe.proto import table
from bkframe.proto.codes import LAST_ENTRY, Status
from bkframe.proto.ops.list_entries import encode_list_entries
from bkframe.testing.cluster import make_config, running_bookie

KEY = b"k" * 20
PD, BYPASS = 0, 2


async def test_bypass_adds_write_no_journal_data(tmp_path: Path) -> None:
    payload = b"x" * 4096
    async with running_bookie(make_config(tmp_path)) as (service, host, port):
        counters = service.bookie.counters  # type: ignore[union-attr]
        async with connect_bookie(host, port) as bk:
            for ledger, type_id in ((1, PD), (2, BYPASS)):
                assert (await bk.add(ledger, 0, payload, master_key=KEY, ledger_type=type_id)).status == Status.OK
                before = counters.journal_bytes_written
                for i in range(1, 101):
                    r = await bk.add(ledger, i, payload, master_key=KEY, ledger_type=type_id)
                    assert r.status == Status.OK
                journaled = counters.journal_bytes_written - before
                if type_id == PD:
                    assert journaled >= 100 * len(payload)
                else:
                    assert journaled == 0  # only the first add's master key went to the journal
            assert (await bk.read(2, 100, master_key=KEY)).data == payload


def crash_marker(data_dir: Path) -> None:
    """What a SIGKILL leaves behind (the bookie process itself stops cleanly here)."""
    (data_dir / UNCLEAN_MARKER).write_text("pid 0\n")


async def test_unclean_restart_puts_bypass_ledgers_in_limbo(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with running_bookie(config) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            for ledger, type_id in ((1, PD), (2, BYPASS)):
                for i in range(3):
                    assert (await bk.add(ledger, i, b"e%d" % i, master_key=KEY, ledger_type=type_id)).status == Status.OK
    crash_marker(tmp_path)
    for restart in range(2):  # limbo and fence survive a further (clean) restart
        async with running_bookie(config) as (_, host, port):
            async with connect_bookie(host, port) as bk:
                info = await bk.info()
                assert info["limbo_ledgers"] == [2]
                assert info["last_shutdown_clean"] is (restart == 1)
                # The PD ledger lost nothing in the crash: untouched.
                assert (await bk.read(1, 7, master_key=KEY)).status == Status.NO_ENTRY
                assert (await bk.add(1, 3, b"e3", master_key=KEY)).status == Status.OK
                # The bypass ledger serves what it holds, never an explicit negative.
                ok = await bk.read(2, 1, master_key=KEY)
                assert (ok.status, ok.data) == (Status.OK, b"e1")
                missing = await bk.read(2, 7, master_key=KEY)
                assert missing.status == Status.UNKNOWN and "limbo" in missing.message
                # Fenced: the old writer is refused; a recovery add is taken.
                add = await bk.add(2, 3 + restart, b"late", master_key=KEY, ledger_type=BYPASS)
                assert add.status == Status.FENCED
                rec = await bk.add(2, 3, b"e3", master_key=KEY, ledger_type=BYPASS, recovery=True)
                assert rec.status == Status.OK


async def test_limbo_ledger_without_entries_answers_unknown_to_last_entry(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with running_bookie(config) as (service, host, port):
        bookie = service.bookie
        assert bookie is not None
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(9, 0, b"a", master_key=KEY, ledger_type=BYPASS)).status == Status.OK
            # A ledger this bookie never saw (its disk was replaced) is created keyless.
            assert protect(bookie, [(9, BYPASS), (10, BYPASS)]) == 2
            assert protect(bookie, [(9, BYPASS)]) == 0
            assert (await bk.read(10, LAST_ENTRY, master_key=KEY)).status == Status.UNKNOWN
            fence = await bk.read(10, LAST_ENTRY, master_key=KEY, fence=True)
            assert fence.status == Status.UNKNOWN
            assert (await bk.read(9, LAST_ENTRY, master_key=KEY)).status == Status.OK
            assert (await bk.read(10, 0, master_key=KEY)).status == Status.UNKNOWN
            assert (await bk.read_lac(10)).status == Status.OK
            assert (await bk.add(10, 0, b"x", master_key=KEY, ledger_type=BYPASS)).status == Status.FENCED


async def test_protection_can_be_switched_off(tmp_path: Path) -> None:
    config = make_config(tmp_path, data_loss_protection=False)
    async with running_bookie(config) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(2, 0, b"a", master_key=KEY, ledger_type=BYPASS)).status == Status.OK
    crash_marker(tmp_path)
    async with running_bookie(config) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            assert (await bk.info())["limbo_ledgers"] == []
            assert (await bk.read(2, 5, master_key=KEY)).status == Status.NO_ENTRY


async def test_explicit_lac_is_journaled_for_bypass_ledgers(tmp_path: Path) -> None:
    """WRITE_LAC: checked like an add, synced before its answer, kept across a crash."""
    from bkframe.testing.cluster import BookieProcess

    b = BookieProcess(tmp_path).start()
    try:
        async with connect_bookie(b.host, b.port) as bk:
            missing = await bk.submit_write_lac(3, 0, master_key=KEY).wait()
            assert missing.status == Status.NO_LEDGER and "add an entry first" in missing.message
            for i in range(5):
                assert (await bk.add(3, i, b"e", master_key=KEY, lac=i - 1, ledger_type=BYPASS)).status == Status.OK
            assert (await bk.read_lac(3)).lac == 3  # what the last add carried
            wrong = await bk.submit_write_lac(3, 4, master_key=b"x" * 20).wait()
            assert wrong.status == Status.UNAUTHORIZED
            ok = await bk.submit_write_lac(3, 4, master_key=KEY).wait()
            assert (ok.status, ok.lac) == (Status.OK, 4)
            assert (await bk.read_lac(3)).lac == 4
            # A lower explicit LAC never moves it back.
            assert (await bk.submit_write_lac(3, 1, master_key=KEY).wait()).lac == 4
        b.kill()  # the LAC was acknowledged after its journal fsync: it survives
        b = BookieProcess(tmp_path).start()
        async with connect_bookie(b.host, b.port) as bk:
            assert (await bk.read_lac(3)).lac == 4
            await bk.read(3, LAST_ENTRY, master_key=KEY, fence=True)
            fenced = await bk.submit_write_lac(3, 5, master_key=KEY).wait()
            assert fenced.status == Status.FENCED
    finally:
        b.kill()


async def test_list_entries_reports_runs_and_limbo(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(reads, "MAX_LIST_SPAN", 8)  # the bookie runs in this process
    async with running_bookie(make_config(tmp_path)) as (service, host, port):
        async with connect_bookie(host, port) as bk:
            for i in (0, 1, 2, 5, 9, 10):
                assert (await bk.add(4, i, b"e", master_key=KEY, ledger_type=BYPASS)).status == Status.OK
            first = await bk.submit_list_entries(4, 0, 20).wait()
            assert (first.status, first.runs, first.next_first, first.limbo) == (Status.OK, ((0, 2), (5, 5)), 8, False)
            rest = await bk.submit_list_entries(4, first.next_first, 20).wait()
            assert (rest.runs, rest.next_first) == (((9, 10),), 16)
            end = await bk.submit_list_entries(4, rest.next_first, 20).wait()
            assert (end.runs, end.next_first) == ((), -1)
            assert (await bk.submit_list_entries(4, 3, 4).wait()).runs == ()
            assert (await bk.submit_list_entries(99, 0, 1).wait()).status == Status.NO_LEDGER
            protect(service.bookie, [(4, BYPASS)])  # type: ignore[arg-type]
            assert (await bk.submit_list_entries(4, 0, 3).wait()).limbo is True
            bad = await bk.submit(table.LIST_ENTRIES, lambda rid: encode_list_entries(rid, 4, 5, 2)).wait()
            assert bad.status == Status.BAD_REQUEST and "invalid" in bad.message
