"""The fault suite's subscription clients (docs/subscriptions.md): ``python -m tests.faults.sub_worker ROLE ...``.

``producer``  appends keyed records to the run's log (``--log``): a few appends in flight at
              a time, each record's payload naming its producer and sequence number, its key
              ``k<seq % keys>``; every append that returned is recorded with its position.
              When the writer loses the log it takes the log over again (``open_writer``).
``consumer``  consumes the log's key_shared subscription (``--sub``): records every record it
              receives, works on it a moment, then acks it (recording the ack before it is
              sent and once it returned) or, now and then, nacks it. With ``--group-acks``
              its acks are grouped (``subscribe(..., group_acks=True)``): an ack is recorded
              as returned once the consumer has no ack left unsent after a call that did
              not raise (its group went out and was confirmed).
``drain``     after the run, with every other worker stopped: settles the log (takes it over
              and closes it, so its end is final), then consumes and acks until the
              subscription's backlog is 0, recording as a consumer does, and records the
              final stats (or, past ``--drain-s``, that it could not empty it).

Only the public API: whether the subscription's owner runs in a consumer's process or on a
bookie, these workers do the same. Every call has the worker's deadline (worker.py): past it
the worker records ``hung`` and exits. Records (records.py) added here:

``sub-append`` pos key seq            an append to the log returned this position
``sub-producer-failed`` error         the producer lost the log (it takes it over again)
``sub-recv`` pos key seq count deadline   a consumer received a record (delivery ``count``,
                                      leased until ``deadline``, ms since the epoch)
``sub-acking`` pos                    a consumer is about to send the record's ack
``sub-acked`` pos                     ... and the ack returned (it is durable)
``sub-ack-failed`` pos error          ... or it raised
``sub-nacking`` pos, ``sub-nacked`` pos, ``sub-nack-failed`` pos error   the same for a nack
``sub-error`` call error              another call raised (e.g. NotOwnerError while another
                                      process owns the subscription)
``sub-closing``                       the consumer leaves (its leases end)
``sub-drained`` backlog in_flight acked redelivered epoch seconds   the drain emptied it
``sub-drain-stuck`` backlog in_flight error seconds                 ... or could not
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import trio

import bkframe
from tests.faults.worker import HUNG_EXIT, Worker

log = logging.getLogger("faults.sub_worker")

#: Appends in flight at most, and the pause after each batch: some 25 records a second,
#: which two consumers keep up with while faults come and go.
WINDOW = 4
PAUSE_S = 0.15
#: Keys drawn round-robin: enough that several are in flight at once, few enough that each
#: key has many records whose order the checks can see.
KEYS = 12
#: A consumer's lock on the subscription's owner (when the owner runs in consumer processes)
#: expires this long after its process died or hung: another takes over soon after.
OWNER_TTL_S = 2.0
#: How long a call waits for a reachable owner before it raises NotOwnerError. Short, so a
#: consumer waiting on another's ownership sees its stop file soon.
WAIT_S = 5.0
NACK_FRACTION = 0.05
NACK_DELAY_S = 0.2


def payload(seed: int, producer: str, seq: int) -> bytes:
    return f"{seed}/{producer}/{seq}".encode()


def parse_payload(data: bytes) -> tuple[str, int] | None:
    """(producer, seq) of a payload :func:`payload` made; None for other bytes."""
    try:
        _, producer, seq = data.decode().split("/")
        return producer, int(seq)
    except ValueError:
        return None


def key_of(seq: int) -> str:
    return f"k{seq % KEYS}"


async def run_producer(wk: Worker) -> None:
    name = wk.args.log
    async with bkframe.open_client(wk.args.metadata) as client:
        seq = 0
        while not wk.stopping():
            try:
                with wk.deadline(f"open_writer({name})"):
                    writer = await client.logs.open_writer(name)
            except bkframe.BKError as err:
                # Not decidable yet (bookies of an open segment down): the faults heal, retry.
                log.info("open_writer(%s): %s; retrying", name, err)
                await trio.sleep(0.5)
                continue
            try:
                seq = await produce(wk, name, writer, seq)
                with wk.deadline(f"close the writer of {name}"):
                    await writer.close()
                return
            except bkframe.BKError as err:
                wk.records.write("sub-producer-failed", log=name, error=f"{type(err).__name__}: {err}")
                # Appends in flight may be in the log or not: the next sequence numbers are
                # past them, so that no two records say the same.
                seq += WINDOW


async def produce(wk: Worker, name: str, writer: bkframe.LogWriter, seq: int) -> int:
    """Append until told to stop; the next sequence number. A BKError is the writer's loss."""
    while not wk.stopping():
        pending = []
        for s in range(seq, seq + WINDOW):
            pa = writer.append_async(payload(wk.args.seed, wk.name, s), key=key_of(s).encode())
            pending.append((s, pa))
        seq += WINDOW
        for s, pa in pending:
            with wk.deadline(f"append to {name} (record {s})"):
                pos = await pa.wait()
            wk.records.write("sub-append", log=name, pos=str(pos), key=key_of(s), seq=s)
        await trio.sleep(wk.rng.uniform(0.5, 1.5) * PAUSE_S)
    return seq


async def handle(
    wk: Worker, msg: bkframe.Message, *, work_s: float, nack_fraction: float, grouped: list[str] | None = None
) -> None:
    """Record the receipt, work a moment, then ack (or nack) it, recording each step. With
    ``grouped`` (the consumer groups its acks) an ack is added to it, not recorded as returned."""
    got = parse_payload(msg.payload)
    wk.records.write(
        "sub-recv", pos=str(msg.position), key=(msg.key or b"").decode(errors="replace"),
        producer=got[0] if got else None, seq=got[1] if got else None, count=msg.delivery_count,
        deadline=msg.deadline_ms,
    )
    if work_s:
        await trio.sleep(wk.rng.uniform(0.0, work_s))
    if wk.rng.random() < nack_fraction:
        wk.records.write("sub-nacking", pos=str(msg.position))
        try:
            with wk.deadline(f"nack of {msg.position}"):
                await msg.nack(NACK_DELAY_S)
        except bkframe.BKError as err:
            wk.records.write("sub-nack-failed", pos=str(msg.position), error=f"{type(err).__name__}: {err}")
            return
        wk.records.write("sub-nacked", pos=str(msg.position))
        return
    wk.records.write("sub-acking", pos=str(msg.position))
    if grouped is not None:
        grouped.append(str(msg.position))  # a failed group stays unsent: its acks go with the next
    try:
        with wk.deadline(f"ack of {msg.position}"):
            await msg.ack()
        if grouped is not None:
            return
    except bkframe.BKError as err:
        if grouped is not None:
            raise
        # The owner ended (fenced while this process hung, its lock lost): the record comes
        # again to whoever owns it now; nothing more to do here.
        wk.records.write("sub-ack-failed", pos=str(msg.position), error=f"{type(err).__name__}: {err}")
        return
    wk.records.write("sub-acked", pos=str(msg.position))


async def run_consumer(wk: Worker) -> None:
    args = wk.args
    async with bkframe.open_client(args.metadata, subscription_owner_ttl_s=OWNER_TTL_S, subscription_wait_s=WAIT_S) as bk:
        with wk.deadline(f"subscribe({args.log}, {args.sub})"):
            consumer = await bk.logs.subscribe(args.log, args.sub, prefetch=args.prefetch, group_acks=args.group_acks)
        #: Grouped acks made, their group not confirmed yet.
        grouped: list[str] | None = [] if args.group_acks else None
        async with consumer:
            while not wk.stopping():
                try:
                    with wk.deadline("receive"):
                        msg = await consumer.receive(timeout_s=1.0)
                    confirmed(wk, consumer, grouped)
                    if msg is not None:
                        await handle(wk, msg, work_s=args.work_s, nack_fraction=NACK_FRACTION, grouped=grouped)
                        confirmed(wk, consumer, grouped)
                except bkframe.BKError as err:
                    # Another process owns the subscription (the owner in a consumer's
                    # process), or a failover is under way: ask again.
                    wk.records.write("sub-error", call="receive", error=f"{type(err).__name__}: {err}")
                    await trio.sleep(0.2)
                    continue
            wk.records.write("sub-closing")


def confirmed(wk: Worker, consumer: bkframe.Subscription, grouped: list[str] | None) -> None:
    """After a call that did not raise: with no ack left unsent, every grouped ack returned."""
    if grouped and consumer.unsent_acks == 0:
        for pos in grouped:
            wk.records.write("sub-acked", pos=pos)
        grouped.clear()


async def settle_log(wk: Worker, client: bkframe.Client, name: str, give_up: float) -> None:
    """Take the log over and close it: a producer's open segment is recovered and its end final."""
    while True:
        try:
            with wk.deadline(f"settle {name} (open_writer, close)"):
                writer = await client.logs.open_writer(name)
                await writer.close()
            return
        except bkframe.BKError as err:
            if trio.current_time() > give_up:
                raise
            log.info("settle %s: %s; retrying", name, err)
            await trio.sleep(0.5)


async def run_drain(wk: Worker) -> None:
    args = wk.args
    started = time.monotonic()
    give_up = trio.current_time() + args.drain_s
    async with bkframe.open_client(
        args.metadata, subscription_owner_ttl_s=OWNER_TTL_S, subscription_wait_s=args.call_timeout / 2
    ) as bk:
        await settle_log(wk, bk, args.log, give_up)
        with wk.deadline(f"subscribe({args.log}, {args.sub})"):
            consumer = await bk.logs.subscribe(args.log, args.sub, prefetch=16)
        async with consumer:
            stats = None
            error = ""
            while trio.current_time() < give_up:
                try:
                    with wk.deadline("receive (drain)"):
                        msg = await consumer.receive(timeout_s=1.0)
                    if msg is not None:
                        await handle(wk, msg, work_s=0.0, nack_fraction=0.0)
                        continue
                    with wk.deadline("subscription_stats (drain)"):
                        stats = await bk.logs.subscription_stats(args.log, args.sub)
                except bkframe.BKError as err:
                    error = f"{type(err).__name__}: {err}"
                    wk.records.write("sub-error", call="drain", error=error)
                    await trio.sleep(0.5)
                    continue
                if stats.backlog == 0 and stats.in_flight == 0:
                    wk.records.write(
                        "sub-drained", backlog=stats.backlog, in_flight=stats.in_flight, acked=stats.acked,
                        redelivered=stats.redelivered, delivered=stats.delivered, epoch=stats.epoch,
                        seconds=round(time.monotonic() - started, 2),
                    )
                    return
            wk.records.write(
                "sub-drain-stuck", backlog=None if stats is None else stats.backlog,
                in_flight=None if stats is None else stats.in_flight, error=error,
                seconds=round(time.monotonic() - started, 2),
            )
    logging.shutdown()
    os._exit(HUNG_EXIT)


ROLES = {"producer": run_producer, "consumer": run_consumer, "drain": run_drain}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.sub_worker")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--metadata", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--call-timeout", type=float, default=60.0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--sub", default="")
    parser.add_argument("--prefetch", type=int, default=4)
    parser.add_argument("--group-acks", action="store_true", help="a consumer groups its acks")
    parser.add_argument("--work-s", type=float, default=0.02, help="longest time a consumer works on a record")
    parser.add_argument("--drain-s", type=float, default=90.0, help="the drain gives up after this long")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker = Worker(args)
    log.info("%s %s starting (pid %d)", args.role, args.name, os.getpid())
    trio.run(ROLES[args.role], worker)
    log.info("%s %s done", args.role, args.name)


if __name__ == "__main__":
    main()
