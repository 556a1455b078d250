"""The suite's client processes: ``python -m tests.faults.worker ROLE ...``.

``writer``  creates ledgers one after another (type and quorums drawn from its menu), appends
            derived payloads with a random pipeline depth, syncs VD ledgers now and then,
            closes each ledger (sometimes while still appending), and records every
            acknowledgement (see records.py). When a ledger's handle fails, it recovers that
            ledger in the background, as an application would, and starts the next one.
``reader``  opens recent ledgers without recovery, reads up to their LAC and checks the bytes.
``recover`` opens one ledger with recovery (retrying while the cluster cannot decide yet),
            records the closed end, then reads the whole ledger back and checks it.

Every client call has a deadline: a call that passes it is recorded as ``hung`` (naming
the call) and the process exits with status 3 at once, so a hang is a clear failure and
never a stuck test. Workers stop when the harness creates their stop file.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import trio

import bkframe
from bkframe import LedgerMetadata, PendingAppend
from tests.faults.payloads import BIG_KEY, PASSWORD, SEED_KEY, WRITER_KEY, digest, expected_from_custom, payload
from tests.faults.records import RecordFile

HUNG_EXIT = 3
GAVE_UP_EXIT = 4

log = logging.getLogger("faults.worker")


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.name: str = args.name
        self.records = RecordFile(Path(args.records), args.name)
        self.stop_file = Path(args.stop_file) if args.stop_file else None
        self.call_timeout: float = args.call_timeout
        self.rng = random.Random(f"{args.seed}/{args.name}")

    def stopping(self) -> bool:
        return self.stop_file is not None and self.stop_file.exists()

    @contextmanager
    def deadline(self, what: str, seconds: float | None = None) -> Iterator[None]:
        """A client call that must finish in ``seconds``; past it, record and exit."""
        limit = self.call_timeout if seconds is None else seconds
        try:
            with trio.fail_after(limit):
                yield
        except trio.TooSlowError:
            self.records.write("hung", what=what, seconds=limit)
            log.error("%s: %s did not finish in %.0f s; exiting", self.name, what, limit)
            logging.shutdown()
            os._exit(HUNG_EXIT)


# -- writer ------------------------------------------------------------------------------


def parse_menu(text: str) -> list[tuple[str, int, int, int]]:
    """``PD_JOURNAL:3:3:2,VD_JOURNAL:3:3:2`` -> [(type, E, W, A), ...]."""
    menu = []
    for item in text.split(","):
        kind, e, w, a = item.split(":")
        menu.append((kind, int(e), int(w), int(a)))
    return menu


async def run_writer(wk: Worker) -> None:
    args = wk.args
    menu = parse_menu(args.menu)
    async with bkframe.open_client(args.metadata) as client, trio.open_nursery() as recoveries:
        while not wk.stopping():
            kind, e, w, a = wk.rng.choice(menu)
            big = wk.rng.random() < args.big_fraction
            count = wk.rng.randint(args.min_entries, args.max_entries // 5 if big else args.max_entries)
            window = wk.rng.choice((1, 4, 16, 64))
            sync_every = wk.rng.choice((8, 32, 128))
            # Sometimes close() while appends are still being made: none may be
            # acknowledged beyond the end the close records.
            racing_close = wk.rng.random() < 0.25
            writer = await create_ledger(wk, client, kind, e, w, a, big)
            if writer is None:
                return
            plan = Plan(count, window, sync_every if kind == "VD_JOURNAL" else 0, big, racing_close)
            if not await write_ledger(wk, writer, plan):
                # As an application would: recover the ledger its handle gave up on (in the
                # background, while faults heal). Left open, a BYPASS ledger keeps a bookie
                # that lost its master key in limbo until someone recovers it.
                recoveries.start_soon(recover_failed, wk, client, writer.ledger_id)
            await trio.sleep(wk.rng.uniform(0.0, args.pause))


async def create_ledger(
    wk: Worker, client: bkframe.Client, kind: str, e: int, w: int, a: int, big: bool
) -> bkframe.WriteHandle | None:
    custom = {WRITER_KEY: wk.name, SEED_KEY: str(wk.args.seed), BIG_KEY: "1" if big else "0"}
    what = f"create_ledger({kind} E={e} W={w} A={a})"
    # Bookies may be down for a while: retry "not enough bookies" within one deadline.
    with wk.deadline(what):
        while True:
            try:
                writer = await client.create_ledger(
                    ensemble=e, write_quorum=w, ack_quorum=a, ledger_type=kind, password=PASSWORD, custom=custom
                )
                break
            except bkframe.NotEnoughBookiesError as err:
                log.info("%s: %s", what, err)
                if wk.stopping():
                    return None
                await trio.sleep(0.5)
    wk.records.write(
        "created", ledger=writer.ledger_id, type=kind, e=e, w=w, a=a, big=big,
        ensemble=list(writer.metadata.fragments[0][1]),
    )
    return writer


@attrs.frozen
class Plan:
    """How one ledger is written."""

    count: int
    #: Appends in flight at most.
    window: int
    #: VD: sync() after every this many entries (0: never).
    sync_every: int
    big: bool
    #: Call close() while appends are still being made.
    racing_close: bool


async def write_ledger(wk: Worker, writer: bkframe.WriteHandle, plan: Plan) -> bool:
    """Write and close one ledger; False if the handle failed (the ledger may be left open)."""
    ledger = writer.ledger_id
    seed = wk.args.seed
    pending: deque[tuple[PendingAppend, int, str]] = deque()  # (append, entry id, payload hash)

    def append(entry_id: int) -> None:
        data = payload(seed, wk.name, ledger, entry_id, plan.big)
        pa = writer.append_async(data)
        if pa.entry_id != entry_id:
            wk.records.write("ack-mismatch", ledger=ledger, entry=pa.entry_id, expected=entry_id)
        pending.append((pa, entry_id, digest(data)))

    async def harvest_one() -> None:
        pa, entry_id, h = pending[0]
        with wk.deadline(f"append of entry {ledger}:{entry_id}"):
            got = await pa.wait()
        pending.popleft()
        if got != entry_id:
            wk.records.write("ack-mismatch", ledger=ledger, entry=got, expected=entry_id)
        wk.records.write("ack", ledger=ledger, entry=entry_id, hash=h)

    next_entry = 0
    try:
        while next_entry < plan.count and not wk.stopping():
            append(next_entry)
            next_entry += 1
            while len(pending) >= plan.window:
                await harvest_one()
            if plan.sync_every and next_entry % plan.sync_every == 0:
                while pending:
                    await harvest_one()
                with wk.deadline(f"sync of ledger {ledger}"):
                    upto = await writer.sync()
                wk.records.write("synced", ledger=ledger, upto=upto)
            if next_entry % 16 == 0:
                await trio.sleep(wk.rng.uniform(0.0, 0.03))  # leave the two cores some air
        if plan.racing_close and not wk.stopping():
            return await racing_close(wk, writer, pending, next_entry, append)
        while pending:
            await harvest_one()
        wk.records.write("closing", ledger=ledger)
        with wk.deadline(f"close of ledger {ledger}"):
            md = await writer.close()
        wk.records.write("closed", ledger=ledger, last=md.last_entry_id, by=wk.name)
        return True
    except bkframe.BKError as err:
        await writer_failed(wk, writer, pending, err, next_entry, plan.big)
        return False


async def racing_close(
    wk: Worker,
    writer: bkframe.WriteHandle,
    pending: deque[tuple[PendingAppend, int, str]],
    next_entry: int,
    append: Callable[[int], None],
) -> bool:
    """close() with appends in flight and more made while it runs. Appends made after
    close() started may fail; none may be acknowledged beyond the end it records."""
    ledger = writer.ledger_id
    closed: list[LedgerMetadata] = []
    close_error: list[bkframe.BKError] = []

    async def close() -> None:
        try:
            with wk.deadline(f"close of ledger {ledger} (with appends racing it)"):
                closed.append(await writer.close())
        except bkframe.BKError as e:
            close_error.append(e)

    wk.records.write("closing", ledger=ledger, racing=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(close)
        await trio.sleep(0)  # close() is under way
        for _ in range(wk.rng.randint(1, 8)):
            try:
                append(next_entry)
            except bkframe.BKError as e:
                wk.records.write("append-refused", ledger=ledger, entry=next_entry, error=type(e).__name__)
                break
            next_entry += 1
            await trio.sleep(wk.rng.choice((0.0, 0.0, 0.001, 0.01)))
        for pa, entry_id, h in pending:
            try:
                with wk.deadline(f"append of entry {ledger}:{entry_id} (racing close)"):
                    await pa.wait()
            except bkframe.BKError as e:
                wk.records.write("append-failed", ledger=ledger, entry=entry_id, error=type(e).__name__)
                continue
            wk.records.write("ack", ledger=ledger, entry=entry_id, hash=h)
    if closed:
        wk.records.write("closed", ledger=ledger, last=closed[0].last_entry_id, by=wk.name)
        return True
    err = close_error[0]
    wk.records.write("writer-failed", ledger=ledger, error=f"close: {type(err).__name__}: {err}")
    return False


async def writer_failed(
    wk: Worker,
    writer: bkframe.WriteHandle,
    pending: deque[tuple[PendingAppend, int, str]],
    err: bkframe.BKError,
    next_entry: int,
    big: bool,
) -> None:
    ledger = writer.ledger_id
    # Completions come in entry order, but record any that did complete before the error.
    for pa, entry_id, h in pending:
        if pa.done() and pa.error is None:
            wk.records.write("ack", ledger=ledger, entry=entry_id, hash=h)
    wk.records.write("writer-failed", ledger=ledger, error=f"{type(err).__name__}: {err}")
    # The failed handle must refuse anything more (a fenced writer adds nothing).
    try:
        with wk.deadline(f"append on the failed handle of ledger {ledger}"):
            entry_id = await writer.append(payload(wk.args.seed, wk.name, ledger, next_entry, big))
        wk.records.write("append-after-failure", ledger=ledger, ok=True, entry=entry_id)
    except bkframe.BKError as again:
        wk.records.write("append-after-failure", ledger=ledger, ok=False, error=type(again).__name__)


# -- reader ------------------------------------------------------------------------------


async def run_reader(wk: Worker) -> None:
    async with bkframe.open_client(wk.args.metadata) as client:
        while not wk.stopping():
            with wk.deadline("list_ledgers"):
                ids = await client.list_ledgers()
            if not ids:
                await trio.sleep(0.2)
                continue
            ledger = wk.rng.choice(sorted(ids)[-12:])
            try:
                await read_some(wk, client, ledger)
            except bkframe.NoSuchLedgerError:
                pass
            except bkframe.BKError as err:
                wk.records.write("read-error", ledger=ledger, error=f"{type(err).__name__}: {err}")
            await trio.sleep(wk.rng.uniform(0.02, 0.2))


async def read_some(wk: Worker, client: bkframe.Client, ledger: int) -> None:
    with wk.deadline(f"open_ledger({ledger}, recovery=False)"):
        handle = await client.open_ledger(ledger, password=PASSWORD, recovery=False)
    if handle.closed:
        wk.records.write("closed-seen", ledger=ledger, last=handle.lac)
    with wk.deadline(f"read_lac({ledger})"):
        lac = await handle.read_lac()
    if lac < 0:
        return
    wk.records.write("lac-seen", ledger=ledger, lac=lac)
    first = wk.rng.randint(max(0, lac - 100), lac)
    last = min(lac, first + wk.rng.randint(0, 40))
    try:
        with wk.deadline(f"read({ledger}, {first}..{last})"):
            entries = await handle.read(first, last)
    except bkframe.NoSuchEntryError:
        # Every replica said "no such entry" for an entry <= LAC. The handle's fragments may
        # predate an ensemble change: look again with fresh metadata before calling it lost.
        with wk.deadline(f"open_ledger({ledger}, recovery=False)"):
            handle = await client.open_ledger(ledger, password=PASSWORD, recovery=False)
        try:
            with wk.deadline(f"read({ledger}, {first}..{last})"):
                entries = await handle.read(first, last)
        except bkframe.NoSuchEntryError as err:
            wk.records.write("read-absent", ledger=ledger, first=first, last=last, lac=lac, error=str(err))
            return
    check_entries(wk, handle.metadata.custom, ledger, entries)


def check_entries(wk: Worker, custom: dict[str, str], ledger: int, entries: list[bkframe.Entry]) -> None:
    if not entries:
        return
    for entry in entries:
        want = expected_from_custom(custom, ledger, entry.entry_id)
        if want is not None and entry.payload != want:
            wk.records.write(
                "read-mismatch", ledger=ledger, entry=entry.entry_id, hash=digest(entry.payload), expected=digest(want)
            )
    wk.records.write("read", ledger=ledger, first=entries[0].entry_id, last=entries[-1].entry_id)


# -- recover -----------------------------------------------------------------------------


async def recover_ledger(wk: Worker, client: bkframe.Client, ledger: int, give_up_s: float) -> None:
    """Open with recovery, retrying "not decidable yet" (the faults heal) for ``give_up_s``;
    record the end, then read the whole ledger back and check it."""
    give_up_at = time.monotonic() + give_up_s
    with wk.deadline(f"metadata of ledger {ledger}"):
        before = await client.ledger_metadata(ledger)
    while True:
        try:
            with wk.deadline(f"open_ledger({ledger}, recovery=True)"):
                handle = await client.open_ledger(ledger, password=PASSWORD, recovery=True)
            break
        except bkframe.BKError as err:
            if time.monotonic() > give_up_at:
                wk.records.write("gave-up", ledger=ledger, error=f"{type(err).__name__}: {err}")
                raise
            log.info("recovery of %d: %s; retrying", ledger, err)
            await trio.sleep(0.5)
    last = handle.lac
    # The ensemble this recovery fenced: the old writer's. Autorecovery may later replace
    # its bookies by copies that were never fenced -- and that the old writer never knew.
    wk.records.write(
        "recovered", ledger=ledger, last=last, was_open=not before.closed, ensemble=list(handle.metadata.fragments[-1][1])
    )
    for first in range(0, last + 1, 200):
        try:
            with wk.deadline(f"read({ledger}, {first}..{min(last, first + 199)}) after recovery"):
                entries = await handle.read(first, min(last, first + 199))
        except bkframe.BKError as err:
            wk.records.write("read-error", ledger=ledger, error=f"{type(err).__name__}: {err}")
            return
        check_entries(wk, handle.metadata.custom, ledger, entries)


async def recover_failed(wk: Worker, client: bkframe.Client, ledger: int) -> None:
    try:
        await recover_ledger(wk, client, ledger, wk.args.give_up)
    except bkframe.BKError:
        pass  # recorded as gave-up; the final check recovers it again


async def run_recover(wk: Worker) -> None:
    async with bkframe.open_client(wk.args.metadata) as client:
        try:
            await recover_ledger(wk, client, wk.args.ledger, wk.args.give_up)
        except bkframe.BKError:
            logging.shutdown()
            os._exit(GAVE_UP_EXIT)


ROLES = {"writer": run_writer, "reader": run_reader, "recover": run_recover}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.worker")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--metadata", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--call-timeout", type=float, default=60.0)
    parser.add_argument("--menu", default="PD_JOURNAL:3:3:2")
    parser.add_argument("--min-entries", type=int, default=50)
    parser.add_argument("--max-entries", type=int, default=800)
    parser.add_argument("--ledger", type=int, default=-1)
    parser.add_argument("--give-up", type=float, default=120.0)
    parser.add_argument("--pause", type=float, default=0.2, help="longest pause between two ledgers, seconds")
    parser.add_argument("--big-fraction", type=float, default=0.1, help="of ledgers with 4-32 KiB entries")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker = Worker(args)
    log.info("%s %s starting (pid %d)", args.role, args.name, os.getpid())
    trio.run(ROLES[args.role], worker)
    log.info("%s %s done", args.role, args.name)


if __name__ == "__main__":
    main()
