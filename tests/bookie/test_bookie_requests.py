"""A bookie served over a real socket on port 0: adds, reads, keys, fences, restarts."""

from __future__ import annotations

from pathlib import Path

import trio

from bkframe.client.bookies.connection import connect_bookie
from bkframe.proto.codes import LAST_ENTRY, Status
from bkframe.testing.cluster import make_config, running_bookie

KEY = b"secret"


async def test_add_and_read_back(tmp_path: Path) -> None:
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            payloads = [f"entry-{i}".encode() * (i + 1) for i in range(50)]
            pending = [bk.submit_add(7, i, data, master_key=KEY, lac=i - 1) for i, data in enumerate(payloads)]
            for i, pend in enumerate(pending):
                r = await pend.wait()
                assert (r.status, r.ledger_id, r.entry_id) == (Status.OK, 7, i)
            for i, data in enumerate(payloads):
                r = await bk.read(7, i, master_key=KEY)
                assert r.status == Status.OK
                assert r.data == data
            last = await bk.read(7, LAST_ENTRY, master_key=KEY)
            assert (last.status, last.entry_id, last.data) == (Status.OK, 49, payloads[49])
            lac = await bk.read_lac(7)
            assert (lac.status, lac.lac, lac.last_entry) == (Status.OK, 48, 49)


async def test_missing_entry_and_ledger(tmp_path: Path) -> None:
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(1, 0, b"x", master_key=KEY)).status == Status.OK
            r = await bk.read(1, 5, master_key=KEY)
            assert r.status == Status.NO_ENTRY
            assert "1:5" in r.message
            assert (await bk.read(99, 0, master_key=KEY)).status == Status.NO_LEDGER
            assert (await bk.read_lac(99)).status == Status.NO_LEDGER


async def test_wrong_master_key_is_unauthorized(tmp_path: Path) -> None:
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(3, 0, b"a", master_key=KEY)).status == Status.OK
            r = await bk.add(3, 1, b"b", master_key=b"other")
            assert r.status == Status.UNAUTHORIZED
            assert (await bk.read(3, 0, master_key=b"other", fence=True)).status == Status.UNAUTHORIZED
            # The rejected add stored nothing, and the ledger is not fenced by the bad fence.
            assert (await bk.read(3, 1, master_key=KEY)).status == Status.NO_ENTRY
            assert (await bk.add(3, 1, b"b", master_key=KEY)).status == Status.OK


async def test_fence_refuses_adds_and_survives_restart(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with running_bookie(config) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(5, 0, b"a", master_key=KEY)).status == Status.OK
            fence = await bk.read(5, LAST_ENTRY, master_key=KEY, fence=True)
            assert (fence.status, fence.entry_id, fence.data) == (Status.OK, 0, b"a")
            r = await bk.add(5, 1, b"b", master_key=KEY)
            assert r.status == Status.FENCED
            # Recovery adds are allowed on a fenced ledger.
            assert (await bk.add(5, 1, b"b", master_key=KEY, recovery=True)).status == Status.OK
            # Without a metadata store to vouch for it, a ledger this bookie never saw is not
            # fenced into existence (with a store it is: tests/bookie/test_ledger_access.py).
            unknown = await bk.read(6, LAST_ENTRY, master_key=KEY, fence=True)
            assert unknown.status == Status.NO_LEDGER and "without a metadata store" in unknown.message
            assert (await bk.add(6, 0, b"z", master_key=KEY)).status == Status.OK
            info = await bk.info()
            assert info["counters"]["fenced_ledgers"] == 1
    async with running_bookie(config) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(5, 2, b"c", master_key=KEY)).status == Status.FENCED
            assert (await bk.add(6, 1, b"y", master_key=KEY)).status == Status.OK
            assert (await bk.read(5, 1, master_key=KEY)).data == b"b"


async def test_bad_requests_get_clear_errors(tmp_path: Path) -> None:
    config = make_config(tmp_path, max_entry_size=1000)
    async with running_bookie(config) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            r = await bk.add(1, 0, b"x" * 1001, master_key=KEY)
            assert r.status == Status.BAD_REQUEST
            assert "max_entry_size" in r.message
            r = await bk.add(1, 0, b"x", master_key=KEY, ledger_type=4242)
            assert r.status == Status.BAD_REQUEST
            assert "unknown ledger type id 4242" in r.message
            r = await bk.read(1, 0, fence=True)
            assert r.status == Status.BAD_REQUEST
            # Nothing was stored by the rejected adds, and the connection still works.
            assert (await bk.read(1, 0, master_key=KEY)).status == Status.NO_LEDGER
            assert (await bk.add(1, 0, b"x", master_key=KEY)).status == Status.OK


async def test_counters_in_bookie_info(tmp_path: Path) -> None:
    async with running_bookie(make_config(tmp_path, bookie_id="b1")) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            pending = [bk.submit_add(2, i, b"y" * 100, master_key=KEY) for i in range(200)]
            for pend in pending:
                assert (await pend.wait()).status == Status.OK
            info = await bk.info()
    c = info["counters"]
    assert info["bookie_id"] == "b1"
    assert info["ledger_types"]["PD_JOURNAL"] == 0
    assert c["entries_added"] == 200
    assert c["journal_bytes_written"] >= 200 * 100
    assert c["storage_bytes_written"] >= 200 * 100
    assert 1 <= c["journal_fsyncs"] < 200  # group commit: fewer fsyncs than adds
    assert c["fsyncs"] >= c["journal_fsyncs"]
    assert c["fenced_ledgers"] == 0


async def test_clean_restart_keeps_everything_and_trims_journal(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with running_bookie(config) as (service, host, port):
        async with connect_bookie(host, port) as bk:
            for i in range(20):
                assert (await bk.add(9, i, bytes([i]) * 10, master_key=KEY, lac=i - 1)).status == Status.OK
    async with running_bookie(config) as (service, host, port):
        assert service.bookie is not None
        # The clean stop checkpointed: nothing left to replay.
        assert service.bookie.checkpointer.replayed_records == 0
        async with connect_bookie(host, port) as bk:
            for i in range(20):
                assert (await bk.read(9, i, master_key=KEY)).data == bytes([i]) * 10
            assert (await bk.read_lac(9)).lac == 18
            # The master key survived too.
            assert (await bk.add(9, 20, b"", master_key=b"nope")).status == Status.UNAUTHORIZED


async def test_an_error_inside_a_connection_block_propagates(tmp_path: Path) -> None:
    """Regression: closing the connection used to raise Cancelled over the body's error,
    which the connection's nursery then swallowed (failing asserts passed silently)."""
    import pytest

    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        with pytest.RaisesGroup(pytest.RaisesExc(KeyError, match="boom"), flatten_subgroups=True, allow_unwrapped=True):
            async with connect_bookie(host, port) as bk:
                await bk.info()
                raise KeyError("boom")


async def test_write_close_is_advisory_and_kept(tmp_path: Path) -> None:
    """BP-32: WRITE_CLOSE (and a fence) mark the ledger write-closed, tell the entry-log
    manager, and the flag survives a restart."""
    config = make_config(tmp_path)
    async with running_bookie(config) as (service, host, port):
        bookie = service.bookie
        assert bookie is not None
        told: list[int] = []
        logs = bookie.storage._entry_logs  # type: ignore[attr-defined]
        real = logs.write_close
        logs.write_close = lambda ledger_id: (told.append(ledger_id), real(ledger_id))[1]
        async with connect_bookie(host, port) as bk:
            assert (await bk.submit_write_close(8, master_key=KEY).wait()).status == Status.NO_LEDGER
            for ledger in (8, 9):
                assert (await bk.add(ledger, 0, b"a", master_key=KEY)).status == Status.OK
            assert (await bk.submit_write_close(8, master_key=b"bad").wait()).status == Status.UNAUTHORIZED
            ok = await bk.submit_write_close(8, master_key=KEY).wait()
            assert (ok.status, ok.ledger_id) == (Status.OK, 8)
            assert (await bk.submit_write_close(8, master_key=KEY).wait()).status == Status.OK  # idempotent
            await bk.read(9, LAST_ENTRY, master_key=KEY, fence=True)
            # Advisory: the writer may still add (only a fence refuses adds).
            assert (await bk.add(8, 1, b"b", master_key=KEY)).status == Status.OK
            assert (await bk.info())["counters"]["write_closed_ledgers"] == 2
        assert told == [8, 9]
    async with running_bookie(config) as (service, _, _):
        storage = service.bookie.storage  # type: ignore[union-attr]
        assert storage.ledger_state(8).write_closed and storage.ledger_state(9).write_closed  # type: ignore[union-attr]


async def test_a_connection_closed_by_the_bookie_fails_requests_not_the_callers_block(tmp_path: Path) -> None:
    """The bookie goes away: pending requests fail with BookieConnectionError where they are
    awaited, and the caller's block goes on (it used to be cancelled silently, so code
    after the failure never ran and its asserts could not fail)."""
    from bkframe.client.bookies.errors import BookieConnectionError
    from bkframe.testing.cluster import BookieProcess

    b = BookieProcess(tmp_path / "b").start()
    after_failure = False
    try:
        async with connect_bookie(b.host, b.port) as bk:
            assert (await bk.add(1, 0, b"x", master_key=KEY)).status == Status.OK
            # Long polls the bookie holds: they are pending when the bookie dies.
            polls = [bk.submit_read_lac(1, previous_lac=0, timeout_ms=60_000, timeout_s=90) for _ in range(3)]
            b.kill()
            failed = 0
            for poll in polls:
                try:
                    with trio.fail_after(30):
                        await poll.wait()
                except BookieConnectionError:
                    failed += 1
            # The block goes on after the failure: past the connection's own end, and a
            # checkpoint after it (where a cancellation of this block would land).
            with trio.fail_after(30):
                await bk.wait_closed()
            await trio.lowlevel.checkpoint()
            after_failure = failed == 3
    finally:
        if b.proc.poll() is None:
            b.kill()
    assert after_failure
