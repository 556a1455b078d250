"""The two ways a bookie answers a frame: its reader answers at once a frame that waits for
nothing while the connection's writer is idle; everything else goes through the writer,
which waits for the journal. Over a real socket, with the real journal and storage; the
scheduler's work per add counted with :class:`~bkframe.testing.scheduler_passes.PassCounter`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import trio

from bkframe.client.bookies.connection import BookieClient, connect_bookie
from bkframe.client.bookies.pending_response import PendingResponse
from bkframe.proto.codes import Status
from bkframe.testing.cluster import make_config, running_bookie
from bkframe.testing.scheduler_passes import PassCounter

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


READER = "_highlevel_serve_listeners._run_handler"  # (the connection's task: its reader)
WRITER = "BookieServer._answer"


async def _per_add(
    bk: BookieClient, counter: PassCounter, ledger: int, ledger_type: int, n: int = 100
) -> tuple[Counter[str], Counter[str]]:
    """Task steps and wakeups per add, one add in flight (after 20 untimed ones)."""
    for entry in range(20):
        assert (await bk.add(ledger, entry, b"w" * 1024, master_key=KEY, ledger_type=ledger_type)).status == Status.OK
    steps, wakes = Counter(counter.steps), Counter(counter.wakes)
    for entry in range(20, 20 + n):
        assert (await bk.add(ledger, entry, b"w" * 1024, master_key=KEY, ledger_type=ledger_type)).status == Status.OK
    steps = Counter({k: (v - steps[k]) / n for k, v in counter.steps.items()})
    wakes = Counter({k: (v - wakes[k]) / n for k, v in counter.wakes.items()})
    return steps, wakes


async def test_a_lone_bypass_add_costs_its_reader_one_step_and_its_writer_none(tmp_path: Path) -> None:
    """Woken by the socket, the reader reads the add, serves it and answers it in that one
    step: the answer's send takes no scheduler pass of its own (trio's send_all would end
    with one), and the connection's writer never runs."""
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        async with running_bookie(make_config(tmp_path)) as (_, host, port):
            async with connect_bookie(host, port) as bk:
                steps, _ = await _per_add(bk, counter, 5, BYPASS)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert steps[READER] <= 1.1, steps
    assert steps[WRITER] <= 0.1, steps


async def test_a_pd_add_is_handed_over_and_answered_without_extra_passes(tmp_path: Path) -> None:
    """A PD add: the reader hands it to the writer without a pass of its own, and the group
    commit's fsync thread, handing its result back, wakes the writer itself (before, the
    journal task woke it, a pass later)."""
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        async with running_bookie(make_config(tmp_path)) as (_, host, port):
            async with connect_bookie(host, port) as bk:
                steps, wakes = await _per_add(bk, counter, 6, PD)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert steps[READER] <= 1.1, steps
    assert wakes["<TrioToken.run_sync_soon task> -> " + WRITER] >= 0.9, wakes
    assert wakes["FsJournal.run -> " + WRITER] <= 0.05, wakes


async def test_answers_larger_than_the_socket_takes_at_once_arrive_whole_in_order(tmp_path: Path) -> None:
    """Reads of 4 MiB entries, four at a time: each answer is more than the socket takes
    without waiting, so its send is part write, part send_all; every one arrives whole."""
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        async with connect_bookie(host, port) as bk:
            entries = [bytes([i + 1]) * (4 * 1024 * 1024) for i in range(4)]
            for i, entry in enumerate(entries):
                assert (await bk.add(7, i, entry, master_key=KEY, ledger_type=BYPASS)).status == Status.OK
            for _ in range(3):
                order: list[int] = []
                reads = [bk.submit_read(7, i, master_key=KEY) for i in range(4)]
                for i, read in enumerate(reads):
                    read.callback = lambda r, e, i=i, order=order: order.append(i)
                with trio.fail_after(30):
                    for i, read in enumerate(reads):
                        r = await read.wait()
                        assert r.status == Status.OK and bytes(r.data) == entries[i]
                assert order == [0, 1, 2, 3]
