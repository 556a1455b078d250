"""The two ways a bookie answers a frame: its reader answers at once a frame that waits for
nothing while the connection's writer is idle; everything else goes through the writer,
which waits for the journal. Over a real socket, with the real journal and storage."""

from __future__ import annotations

from pathlib import Path

import trio

from bkframe.client.bookie_client import connect_bookie
from bkframe.client.pending_response import PendingResponse
from bkframe.proto.codes import Status
from bkframe.testing.cluster import make_config, running_bookie

KEY = b"k" * 20
PD, BYPASS = 0, 2


async def _sent(n: int = 5) -> None:
    # Let the connection's send loop put what was submitted on the wire as a frame of its own.
    for _ in range(n):
        await trio.lowlevel.checkpoint()


async def test_an_answer_that_waits_for_nothing_never_overtakes_one_that_waits(tmp_path: Path) -> None:
    """A read (and a BYPASS add) that reach the bookie while a PD add waits for its fsync
    are answered after it, on the same connection: the reader answers by itself only when
    the writer holds nothing."""
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(1, 0, b"a", master_key=KEY, ledger_type=PD)).status == Status.OK
            assert (await bk.add(2, 0, b"b", master_key=KEY, ledger_type=BYPASS)).status == Status.OK
            order: list[str] = []

            def note(name: str, pending: PendingResponse) -> None:
                pending.callback = lambda r, e: order.append(name)

            for round_ in range(20):
                order.clear()
                pd = bk.submit_add(1, round_ + 1, b"x" * 1024, master_key=KEY, ledger_type=PD)
                note("pd", pd)
                await _sent()
                read = bk.submit_read(1, 0, master_key=KEY)
                note("read", read)
                await _sent()
                bypass = bk.submit_add(2, round_ + 1, b"y", master_key=KEY, ledger_type=BYPASS)
                note("bypass", bypass)
                for pending in (pd, read, bypass):
                    assert (await pending.wait()).status == Status.OK
                assert order == ["pd", "read", "bypass"], f"round {round_}: {order}"


async def test_answers_at_once_and_long_polls_share_the_connection(tmp_path: Path) -> None:
    """BYPASS adds answered by the reader while long polls of the same connection are
    answered by the writer as the LAC moves: both send on one stream, never at once."""
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(3, 0, b"z", master_key=KEY, ledger_type=BYPASS)).status == Status.OK
            for i in range(1, 200):
                poll = bk.submit_read_lac(3, previous_lac=i - 2, timeout_ms=10_000, timeout_s=30)
                add = bk.submit_add(3, i, b"z" * 512, master_key=KEY, lac=i - 1, ledger_type=BYPASS)
                with trio.fail_after(10):
                    assert (await add.wait()).status == Status.OK
                    r = await poll.wait()
                assert r.status == Status.OK and r.lac >= i - 1
            info = await bk.info()
            assert info["counters"]["entries_added"] == 200
