"""The fault suite's compaction clients (docs/compaction.md): ``python -m tests.faults.compaction_worker ROLE ...``.

``writer``     appends keyed records to the run's compacted log (``--log``): a few in flight
               at a time, key ``k<seq % KEYS>``, payload naming the writer and sequence
               number; one in ``TOMBSTONE_EVERY`` is a tombstone (an empty payload), one in
               ``KEYLESS_EVERY`` has no key. Each append is recorded before it is sent and once
               it returned, with its position. When it loses the log it takes it over again.
``compactor``  compacts the log again and again (``Logs.compact``; replaced ledgers stay past
               the call deadline, so no table read outlives the ledgers it planned to read)
               and, with ``--tier``, offloads all but its last few closed segments after each,
               recording each run's result or error; the schedule kills it (kill -9) at any
               moment and starts another.
``reader``     reads the log as a table (``read(compacted=True)``) again and again, recording
               the end it read to and each row's position and key; reads what its durable
               cursor has not passed yet, recording the tombstones there (none may be gone);
               and moves the cursor to where it read to ``CURSOR_BEHIND`` reads ago.

Records (records.py) added here:

``tab-try`` seq key tomb              an append is about to be sent (``key`` null: keyless)
``tab-append`` pos seq key tomb       ... and it returned this position (acknowledged)
``tab-writer-failed`` error           the writer lost the log (it takes it over again)
``tab-compacted`` end dropped tombstones_dropped rewritten   a compaction finished
``tab-compact-error`` error           a compaction (or an offload) raised (a bookie down: tried again)
``tab-offloaded`` segments             the compactor offloaded these segments
``tab-reading``                       a table read starts (before it asks for the end)
``tab-read`` end rows unpassed_from tombstones   ... and returned the rows ``[[pos, key, seq|null], ...]``;
                                      from ``unpassed_from`` (the first record the cursor had not
                                      passed) to ``end`` it saw these tombstones
``tab-read-error`` error              ... or raised
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import tempfile
from pathlib import Path

import trio

import bkframe
from tests.faults.worker import Worker

log = logging.getLogger("faults.compaction_worker")

#: Appends in flight at most, and the pause after each batch.
WINDOW = 4
PAUSE_S = 0.1
#: Keys drawn round-robin: each has many records, so most of the log is compacted away.
KEYS = 16
TOMBSTONE_EVERY = 11
KEYLESS_EVERY = 13
#: How long a replaced ledger stays for readers, past the call deadline: a table read that
#: takes longer exits as hung, so none can outlive the ledgers it planned to read (the
#: harness's final compaction retires them).
RETIRE_MARGIN_S = 30.0
#: With ``--tier``: the compactor offloads every closed segment but the last this many.
OFFLOAD_BEHIND = 3
#: A killed compactor's lock on the log vanishes this long after (the next one waits for it).
LOCK_TTL_S = 4.0
#: The pause between two compactions, and between two table reads.
COMPACT_PAUSE_S = 0.5
READ_PAUSE_S = 0.3
#: The reader moves its cursor to where it read to this many reads ago: a few seconds of the
#: log, closed segments among them, stay unpassed, and compactions run over them.
CURSOR_BEHIND = 8


def record_of(name: str, seq: int) -> tuple[bytes | None, bytes]:
    """The key and payload of a writer's record ``seq``."""
    key = None if seq % KEYLESS_EVERY == KEYLESS_EVERY - 1 else f"k{seq % KEYS}".encode()
    tomb = key is not None and seq % TOMBSTONE_EVERY == TOMBSTONE_EVERY - 1
    return key, b"" if tomb else f"{name}/{seq}".encode()


async def run_writer(wk: Worker) -> None:
    name = wk.args.log
    async with bkframe.open_client(wk.args.metadata) as client:
        seq = 0
        while not wk.stopping():
            try:
                with wk.deadline(f"open_writer({name})"):
                    writer = await client.logs.open_writer(name)
            except bkframe.BKError as err:
                log.info("open_writer(%s): %s; retrying", name, err)
                await trio.sleep(0.5)
                continue
            try:
                seq = await write(wk, name, writer, seq)
                with wk.deadline(f"close the writer of {name}"):
                    await writer.close()
                return
            except bkframe.BKError as err:
                wk.records.write("tab-writer-failed", error=f"{type(err).__name__}: {err}")
                seq += WINDOW  # those in flight may be in the log or not: never reuse their numbers


async def write(wk: Worker, name: str, writer: bkframe.LogWriter, seq: int) -> int:
    while not wk.stopping():
        pending = []
        for s in range(seq, seq + WINDOW):
            key, data = record_of(wk.name, s)
            wk.records.write("tab-try", seq=s, key=key and key.decode(), tomb=not data)
            pending.append((s, key, data, writer.append_async(data, key=key)))
        seq += WINDOW
        for s, key, data, pa in pending:
            with wk.deadline(f"append to {name} (record {s})"):
                position = await pa.wait()
            wk.records.write("tab-append", pos=str(position), seq=s, key=key and key.decode(), tomb=not data)
        await trio.sleep(PAUSE_S)
    return seq


async def run_compactor(wk: Worker) -> None:
    name = wk.args.log
    work = Path(tempfile.mkdtemp(prefix=f"compactor-{wk.name}-"))
    async with bkframe.open_client(wk.args.metadata) as client:
        while not wk.stopping():
            # A run that outlives the deadline is cancelled: as safe as a kill (that is the point).
            with trio.move_on_after(wk.args.call_timeout) as scope:
                try:
                    result = await client.logs.compact(
                        name, work_dir=work, memory_bytes=1 << 20, retire_lag_s=wk.args.call_timeout + RETIRE_MARGIN_S,
                        lock_ttl_s=LOCK_TTL_S,
                    )
                    wk.records.write(
                        "tab-compacted", end=str(result.end), dropped=result.records_dropped,
                        tombstones_dropped=result.tombstones_dropped, rewritten=len(result.rewritten),
                    )
                except bkframe.BKError as err:
                    wk.records.write("tab-compact-error", error=f"{type(err).__name__}: {err}")
                if wk.args.tier:
                    await offload_some(wk, client, name)
            if scope.cancelled_caught:
                wk.records.write("tab-compact-error", error=f"cancelled after {wk.args.call_timeout} s")
            await trio.sleep(COMPACT_PAUSE_S)


async def offload_some(wk: Worker, client: bkframe.Client, name: str) -> None:
    """Offload the closed segments but the last ``OFFLOAD_BEHIND`` (their ledgers stay on
    the bookies): later compactions read those from the tier and leave them as they are,
    and compacted segments go to the tier with their gaps."""
    try:
        record = await client.logs.metadata(name)
        closed = [s for s in record.segments if s.closed]
        if len(closed) <= OFFLOAD_BEHIND:
            return
        until = closed[-OFFLOAD_BEHIND].first()
        result = await client.logs.offload(name, tier=wk.args.tier, until=until)
        wk.records.write("tab-offloaded", segments=[s.number for s in result.offloaded])
    except bkframe.BKError as err:
        wk.records.write("tab-compact-error", error=f"offload: {type(err).__name__}: {err}")


async def run_reader(wk: Worker) -> None:
    name = wk.args.log
    cursor = bkframe.Position(0, 0)
    ends: collections.deque[bkframe.Position] = collections.deque(maxlen=CURSOR_BEHIND)
    async with bkframe.open_client(wk.args.metadata) as client:
        while not wk.stopping():
            wk.records.write("tab-reading")
            try:
                with wk.deadline(f"read {name} as a table"):
                    reader = await client.logs.reader(name)
                    end = await reader.end()
                    rows = await reader.read(end=end, compacted=True)
                    # What the cursor has not passed: its tombstones must all be there.
                    unpassed = await reader.read(cursor, end) if end > cursor else []
                    ends.append(end)
                    if len(ends) == CURSOR_BEHIND:
                        cursor = (await client.logs.move_cursor(name, "table-reader", ends[0])).position
            except bkframe.BKError as err:
                wk.records.write("tab-read-error", error=f"{type(err).__name__}: {err}")
                await trio.sleep(0.5)
                continue
            wk.records.write(
                "tab-read", end=str(end),
                rows=[[str(e.position), e.key and e.key.decode(), _seq(e.payload)] for e in rows],
                unpassed_from=str(unpassed[0].position if unpassed else end),
                tombstones=[str(e.position) for e in unpassed if e.key is not None and not e.payload],
            )
            await trio.sleep(READ_PAUSE_S)


def _seq(data: bytes) -> int | None:
    try:
        return int(data.decode().rsplit("/", 1)[1])
    except (ValueError, IndexError):
        return None


ROLES = {"writer": run_writer, "compactor": run_compactor, "reader": run_reader}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.compaction_worker")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--metadata", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--call-timeout", type=float, default=60.0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--tier", default="", help="the compactor also offloads older segments to this tier")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker = Worker(args)
    log.info("%s %s starting (pid %d)", args.role, args.name, os.getpid())
    trio.run(ROLES[args.role], worker)
    log.info("%s %s done", args.role, args.name)


if __name__ == "__main__":
    main()
