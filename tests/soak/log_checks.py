"""After a soak: the named logs and their cursors against what the log clients recorded
(log_worker.py), added to the ledgers' CheckResult (tests/faults/checks.py).

Per log:

1. **Settle it as a user would.** ``open_writer`` takes the log over -- recovering and
   closing the segments a failed writer left open -- and ``close`` gives it up, so its end
   is final.
2. **Every acknowledged record is there, in order.** The log read from its start holds, at
   each position a writer's append returned, exactly that writer's record (``lost`` if the
   position holds nothing, ``wrong-bytes`` if other bytes); each writer's records come in
   increasing sequence order, none twice (``log-order``).
3. **No two readers see different bytes.** A second client reads the log again: the same
   positions, the same bytes (``wrong-bytes``).
4. **A cursor is never ahead of what was committed**, nor behind what a commit returned: the
   stored position lies between the last position a consumer's store returned and the last
   it asked for (``cursor-ahead`` / ``cursor-back``), and not past the log's end.
"""

from __future__ import annotations

import collections
from typing import Any

import trio

import bkframe
from bkframe import Position
from tests.faults.checks import CheckResult
from tests.soak.log_worker import log_payload, parse_payload

#: A log that cannot be taken over yet (bookies of an open segment just healed) is retried this long.
SETTLE_S = 120.0


async def check_logs(metadata: str, records: list[dict[str, Any]], seed: int, call_timeout: float,
                     result: CheckResult) -> None:
    acks: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    #: (log, cursor) -> [positions asked to store, positions whose store returned]
    commits: dict[tuple[str, str], tuple[list[Position], list[Position]]] = {}
    for r in records:
        if r["ev"] == "log-ack":
            acks[r["log"]].append(r)
        elif r["ev"] in ("cursor-committing", "cursor-committed"):
            asked, stored = commits.setdefault((r["log"], r["cursor"]), ([], []))
            (asked if r["ev"] == "cursor-committing" else stored).append(Position.parse(r["pos"]))
        elif r["ev"] == "log-read-wrong":
            result.fail("wrong-bytes", f"log {r['log']}: {r['src']} read at {r['pos']}: {r['error']}")
        elif r["ev"] == "log-read":
            result.stats["log_records_consumed"] += r["n"]
    names = sorted(set(acks) | {name for name, _ in commits})
    async with bkframe.open_client(metadata) as client:
        for name in names:
            with trio.fail_after(SETTLE_S + 4 * call_timeout):
                await settle(client, name, call_timeout)
                seen = await read_all(client, name)
            check_acks(name, seed, acks[name], seen, result)
            check_sequences(name, [seen[p] for p in sorted(seen)], result)
            async with bkframe.open_client(metadata) as other:
                with trio.fail_after(4 * call_timeout):
                    again = await read_all(other, name)
            if again != seen:
                differ = [p for p in sorted(set(seen) | set(again)) if seen.get(p) != again.get(p)]
                result.fail("wrong-bytes", f"log {name}: a second reader sees other records at {len(differ)} "
                                           f"position(s), the first {differ[0]}")
            end = max(seen, default=Position(0, -1)).next()
            for (log, cursor), (asked, stored) in sorted(commits.items()):
                if log == name:
                    with trio.fail_after(call_timeout):
                        position = (await client.logs.cursor(name, cursor)).position
                    check_cursor(name, cursor, position, asked, stored, end, result)


async def settle(client: bkframe.Client, name: str, call_timeout: float) -> None:
    give_up = trio.current_time() + SETTLE_S
    while True:
        try:
            with trio.fail_after(call_timeout):
                writer = await client.logs.open_writer(name)
                await writer.close()
            return
        except bkframe.BKError:
            if trio.current_time() > give_up:
                raise
            await trio.sleep(1.0)


async def read_all(client: bkframe.Client, name: str) -> dict[Position, bytes]:
    """Position -> the record's payload, for the whole log from its start."""
    out: dict[Position, bytes] = {}
    reader = await client.logs.reader(name)
    async for chunk in reader.chunks("earliest"):
        for entry in chunk:
            out[entry.position] = entry.payload
    return out


def check_acks(name: str, seed: int, acks: list[dict[str, Any]], seen: dict[Position, bytes],
               result: CheckResult) -> None:
    lost: list[str] = []
    for r in acks:
        pos = Position.parse(r["pos"])
        want = log_payload(seed, r["src"], r["seq"])
        result.stats["log_acked"] += 1
        if pos not in seen:
            lost.append(f"{pos} ({r['src']} #{r['seq']})")
        elif seen[pos] != want:
            result.fail("wrong-bytes", f"log {name} at {pos}: not the record {r['src']} #{r['seq']} acknowledged there")
    if lost:
        result.fail("lost", f"log {name}: {len(lost)} acknowledged record(s) not in the log, the first {lost[:5]}")
    result.stats["log_records_read"] += len(seen)


def check_cursor(name: str, cursor: str, position: Position, asked: list[Position], stored: list[Position],
                 end: Position, result: CheckResult) -> None:
    result.stats["cursors_checked"] += 1
    most_asked = max(asked, default=Position(0, 0))
    if position > most_asked or position > end:
        result.fail("cursor-ahead", f"log {name}: cursor {cursor} stored at {position}, but its consumer never "
                                    f"committed past {most_asked} (the log ends at {end})")
    if stored and position < max(stored):
        result.fail("cursor-back", f"log {name}: cursor {cursor} stored at {position}, behind {max(stored)} whose "
                                   "store had returned")


def check_sequences(name: str, payloads: list[bytes], result: CheckResult) -> None:
    """The log's payloads in position order: each writer's sequence numbers only grow."""
    last: dict[str, int] = {}
    for data in payloads:
        got = parse_payload(data)
        if got is None:
            result.fail("wrong-bytes", f"log {name}: a record no writer made")
            continue
        writer, seq = got
        if seq <= last.get(writer, -1):
            result.fail("log-order", f"log {name}: {writer}'s record #{seq} after its #{last[writer]}")
        last[writer] = seq
