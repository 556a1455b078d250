"""The soak's named-log clients: ``python -m tests.soak.log_worker ROLE ...``.

``logwriter``    is the one writer of its log (``log<slot>``, made with small segments so the
                 soak rolls over often): pipelined appends at a modest pace, each
                 acknowledgement recorded with its position. When the writer loses the log
                 (a fenced segment, a bookie gone for good, a metadata store that did not
                 answer), it records the failure and takes the log over again with
                 ``open_writer`` -- which recovers and closes the segments the failed writer
                 left open -- and records how long that took.
``logconsumer``  follows one log from its durable cursor: reads a batch from the cursor,
                 checks each record (its payload is its writer's and its sequence number,
                 so each writer's records must come in increasing order), acknowledges the
                 batch's last position and stores the cursor (``flush_cursors``), recording
                 the position before the call and after it returned.

Payloads are derived from (seed, writer name, sequence number): the checks know what every
position must hold. Records (records.py) added here:

``log-ack`` log pos seq               an append returned this position
``log-writer-failed`` log error       the writer lost the log
``log-reopened`` log took_s           ``open_writer`` took the log over after a failure
``log-read`` log first last n         a consumer read these records, and they were right
``log-read-wrong`` log pos error      a consumer read a record that was not what was written
``cursor-committing`` log cursor pos  a consumer asked to store its cursor at ``pos``
``cursor-committed`` log cursor pos   ... and the store returned
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import trio

import bkframe
from bkframe import Position
from tests.faults.worker import Worker

log = logging.getLogger("soak.log_worker")

#: Segments this small roll over every few seconds at the writers' pace.
ROLLOVER_ENTRIES = 300
#: Appends in flight at most, and the pause after each batch (about 20-40 records a second).
WINDOW = 8
PAUSE_S = 0.25


def log_name(slot: int) -> str:
    return f"log{slot}"


def log_payload(seed: int, writer: str, seq: int) -> bytes:
    """What writer ``writer``'s ``seq``-th record holds: names its writer and sequence number."""
    return f"{seed}/{writer}/{seq}/".encode() + bytes((seq * 7 + i) % 251 for i in range(64 + seq % 200))


def parse_payload(data: bytes) -> tuple[str, int] | None:
    """(writer, seq) of a payload :func:`log_payload` made, None for any other bytes."""
    try:
        seed, writer, seq, _ = data.split(b"/", 3)
        out = (writer.decode(), int(seq))
        return out if log_payload(int(seed), *out) == data else None
    except ValueError:
        return None


async def run_logwriter(wk: Worker) -> None:
    name = log_name(wk.args.slot)
    async with bkframe.open_client(wk.args.metadata) as client:
        logs = client.logs
        with wk.deadline(f"create log {name}"):
            try:
                await logs.create(name, rollover_entries=ROLLOVER_ENTRIES)
            except bkframe.LogExistsError:
                pass  # an earlier generation of this writer made it
        seq = 0
        failed_at: float | None = None
        while not wk.stopping():
            try:
                with wk.deadline(f"open_writer({name})"):
                    writer = await logs.open_writer(name)
            except bkframe.BKError as err:
                # Not decidable yet (bookies of an open segment down): the faults heal, retry.
                log.info("open_writer(%s): %s; retrying", name, err)
                failed_at = failed_at or time.monotonic()
                await trio.sleep(0.5)
                continue
            if failed_at is not None:
                wk.records.write("log-reopened", log=name, took_s=round(time.monotonic() - failed_at, 3))
                failed_at = None
            try:
                seq = await write_batches(wk, name, writer, seq)
                with wk.deadline(f"close writer of {name}"):
                    await writer.close()
                return
            except bkframe.BKError as err:
                wk.records.write("log-writer-failed", log=name, error=f"{type(err).__name__}: {err}")
                failed_at = time.monotonic()
                # Records appended but not acknowledged may be in the log or not; the next
                # sequence number is past them so that no two records say the same thing.
                seq += WINDOW


async def write_batches(wk: Worker, name: str, writer: bkframe.LogWriter, seq: int) -> int:
    """Append until told to stop; the next sequence number. A BKError is the writer's loss."""
    while not wk.stopping():
        pending = [(s, writer.append_async(log_payload(wk.args.seed, wk.name, s))) for s in range(seq, seq + WINDOW)]
        seq += WINDOW
        for s, pa in pending:
            with wk.deadline(f"append to {name} (record {s})"):
                pos = await pa.wait()
            wk.records.write("log-ack", log=name, pos=str(pos), seq=s)
        await trio.sleep(wk.rng.uniform(0.5, 1.5) * PAUSE_S)
    return seq


async def run_logconsumer(wk: Worker) -> None:
    name, cursor = log_name(wk.args.slot % wk.args.logs), f"c{wk.args.slot}"
    async with bkframe.open_client(wk.args.metadata) as client:
        logs = client.logs
        while True:  # the log's writer makes it: wait for it
            try:
                with wk.deadline(f"create cursor {cursor} of {name}"):
                    await logs.create_cursor(name, cursor, "earliest")
                break
            except bkframe.CursorExistsError:
                break  # an earlier generation of this consumer made it
            except bkframe.NoSuchLogError:
                await trio.sleep(0.5)
        with wk.deadline(f"cursor {cursor} of {name}"):
            start = (await logs.cursor(name, cursor)).position
        #: writer -> the last sequence number read from it (must grow).
        last_seq: dict[str, int] = {}
        while not wk.stopping():
            try:
                with wk.deadline(f"read {name} from {start}"):
                    entries = await (await logs.reader(name)).read(start, max_entries=200)
            except bkframe.BKError as err:
                log.info("read %s from %s: %s", name, start, err)
                await trio.sleep(1.0)
                continue
            if not entries:
                await trio.sleep(0.5)
                continue
            for entry in entries:
                got = parse_payload(entry.payload)
                if got is None or got[1] <= last_seq.get(got[0], -1):
                    why = "not a payload a writer made" if got is None else f"{got} after seq {last_seq[got[0]]}"
                    wk.records.write("log-read-wrong", log=name, pos=str(entry.position), error=why)
                if got is not None:
                    last_seq[got[0]] = got[1]
            wk.records.write(
                "log-read", log=name, first=str(entries[0].position), last=str(entries[-1].position), n=len(entries)
            )
            start = entries[-1].position.next()
            await commit(wk, logs, name, cursor, entries[-1].position)
            await trio.sleep(wk.rng.uniform(0.2, 0.6))


async def commit(wk: Worker, logs: bkframe.Logs, name: str, cursor: str, last: Position) -> None:
    """Acknowledge up to ``last`` and store the cursor; a store that fails now is retried at
    the next batch (the cursor is then further behind, never ahead)."""
    wk.records.write("cursor-committing", log=name, cursor=cursor, pos=str(last.next()))
    try:
        with wk.deadline(f"store cursor {cursor} of {name}"):
            await logs.ack(name, cursor, last)
            await logs.flush_cursors(name, cursor)
    except bkframe.BKError as err:
        log.info("store cursor %s of %s: %s", cursor, name, err)
        return
    wk.records.write("cursor-committed", log=name, cursor=cursor, pos=str(last.next()))


ROLES = {"logwriter": run_logwriter, "logconsumer": run_logconsumer}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.log_worker")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--metadata", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--call-timeout", type=float, default=60.0)
    parser.add_argument("--slot", type=int, required=True, help="the writer's log; the consumer's cursor")
    parser.add_argument("--logs", type=int, default=1, help="logs in the run (a consumer follows log<slot % logs>)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker = Worker(args)
    log.info("%s %s starting (pid %d)", args.role, args.name, os.getpid())
    trio.run(ROLES[args.role], worker)
    log.info("%s %s done", args.role, args.name)


if __name__ == "__main__":
    main()
