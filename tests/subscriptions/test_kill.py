"""Kill -9 (or SIGSTOP) a process that consumes a subscription and owns it
(``subscription_owner = "local"``) (docs/subscriptions.md,
invariants 1-3): another process takes the subscription over once the dead one's lock has
expired, and then no acked record comes again, every record is delivered, and the records
the dead process had received but not acked come with delivery count 2."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import trio

import bkframe
from bkframe import Position

CHILD = Path(__file__).with_name("consumer_process.py")
OWNER_TTL_S = 2.0


async def test_a_killed_consumer_and_owner_loses_no_record_and_repeats_no_ack(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk:
        await bk.logs.create("work", rollover_entries=40)
        async with await bk.logs.open_writer("work") as w:
            await w.append_many([bkframe.Record(b"w%d" % i, key=b"k%d" % (i % 5)) for i in range(200)])
        await bk.logs.create_subscription("work", "s", kind="key_shared", lease_s=60)

    got: list[dict[str, object]] = []
    acked: set[str] = set()
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), bookies, "work", "s", str(OWNER_TTL_S)], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    buffer = b""
    with trio.fail_after(60):
        while len(acked) < 60:
            chunk = await proc.stdout.receive_some()
            assert chunk, "the consumer process ended early"
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                record = json.loads(line)
                if "got" in record:
                    got.append(record["got"])
                else:
                    acked.add(record["acked"])
    proc.send_signal(signal.SIGKILL)  # mid-way: records received, acks in flight
    await proc.wait()

    async with bkframe.open_client(bookies, subscription_owner="local", subscription_owner_ttl_s=OWNER_TTL_S) as bk:
        again: list[tuple[Position, int, bytes | None]] = []
        async with await bk.logs.subscribe("work", "s", prefetch=8) as sub:
            while True:
                stats = await bk.logs.subscription_stats("work", "s")  # waits out the dead owner's lock
                if stats.backlog == 0:
                    break
                msg = await sub.receive(timeout_s=1)
                if msg is not None:
                    again.append((msg.position, msg.delivery_count, msg.key))
                    await msg.ack()
        assert stats.epoch == 2
    first = {str(g["position"]) for g in got}
    second = [str(p) for p, _, _ in again]
    assert not acked & set(second), "an acked record was delivered again"
    assert len(second) == len(set(second))
    everything = {str(Position(s, e)) for s in range(5) for e in range(40)}
    assert first | set(second) == everything  # every record delivered
    received_not_acked = first - acked
    for position, count, _ in again:
        if str(position) in received_not_acked:
            assert count == 2, position  # its first delivery was counted
        else:
            assert count in (1, 2), position  # 2: it sat in the dead process's prefetch
    # key_shared: each key's records, over both processes, were first delivered in log order.
    order: dict[str, list[Position]] = {}
    for g in got:
        order.setdefault(str(g["key"]), []).append(Position.parse(str(g["position"])))
    for key, positions in order.items():
        assert positions == sorted(positions), key


async def test_a_hung_owner_is_fenced_and_its_records_go_to_the_others(bookies: str) -> None:
    """SIGSTOP the process that consumes and owns the subscription: once its lock expires
    another process takes over and fences it; woken with SIGCONT it finds it owns nothing
    and stops, and still no record it acked comes again and none is lost."""
    async with bkframe.open_client(bookies) as bk:
        await bk.logs.create("hung")
        async with await bk.logs.open_writer("hung") as w:
            await w.append_many([b"h%d" % i for i in range(100)])
        await bk.logs.create_subscription("hung", "s", lease_s=5)

    proc = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), bookies, "hung", "s", str(OWNER_TTL_S)], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    lines: list[dict[str, str]] = []
    buffer = b""

    async def read_some() -> bool:
        nonlocal buffer
        chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
        buffer += chunk
        *done, buffer = buffer.split(b"\n")
        lines.extend(json.loads(line) for line in done)
        return bool(chunk)

    def acked() -> set[str]:
        return {line["acked"] for line in lines if "acked" in line}

    try:
        with trio.fail_after(60):
            while len(acked()) < 20:
                assert await read_some(), "the consumer process ended early"
        proc.send_signal(signal.SIGSTOP)
        async with bkframe.open_client(bookies, subscription_owner="local", subscription_owner_ttl_s=OWNER_TTL_S) as bk:
            seen: list[str] = []
            async with await bk.logs.subscribe("hung", "s", prefetch=8) as sub:
                # Waits out the hung owner's lock, then its leases (5 s), for its records.
                while (await bk.logs.subscription_stats("hung", "s")).backlog:
                    msg = await sub.receive(timeout_s=1)
                    if msg is not None:
                        seen.append(str(msg.position))
                        await msg.ack()
                proc.send_signal(signal.SIGCONT)  # it wakes up owning nothing, finds out, and stops
                with trio.fail_after(60):
                    while await read_some():
                        pass
                assert (await proc.wait()) == 3
                assert any("lost" in line for line in lines)
            final = await bk.logs.subscription_stats("hung", "s")
            assert final.backlog == 0 and final.epoch == 2
        assert not acked() & set(seen), "an acked record was delivered again"
        assert len(acked() | set(seen)) == 100
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
