"""After a subscription run: what the producer, the consumers and the drain recorded
(sub_worker.py) against the subscription's invariants (docs/subscriptions.md, "Invariants").
A pure function of the records, added to the run's CheckResult (checks.py).

When was a record leased? A consumer's receipt carries its lease's deadline, which the owner
set to ``now + lease_s`` when it leased it: so the lease's time, on the owner's clock, is
``deadline - lease_s`` (to the millisecond). Every process of a run reads the same machine's
clock (no clock faults in subscription runs), so it compares with the times the workers
recorded. Each check compares so that only a real breach fails it, never a race the model
allows (a lease may follow an ack the owner stored before its consumer recorded the return):

1. ``sub-stuck``: the drain emptied the subscription (backlog 0, nothing in flight).
2. ``sub-lost``: every append the producer saw return was received at least once.
3. ``sub-wrong-record``: a received record is the one appended at its position (key, seq).
4. ``sub-acked-redelivered``: no record was leased after an ack of it had returned.
5. ``sub-key-overlap`` (key_shared): no record of a key was leased while another lease of
   that key still held. A lease holds until the earliest of: an ack or nack of its record
   was sent and had not returned before the lease (by anyone: acking a record whose lease
   moved on is allowed), its deadline, and its consumer's end (killed, or leaving).
6. ``sub-key-order`` (key_shared): a key's records were first received in log order.
7. ``sub-count``: a record's delivery counts grow from one receipt to the next.
8. ``sub-counters``: the subscription's totals, as the drain read them, agree with the
   records: every record delivered was acked once (``acked`` is the number of positions
   received, and each had one first delivery: ``delivered - redelivered``), and no delivery
   a consumer saw is missing from ``delivered`` or ``redelivered``. Totals lost or counted
   twice in a failover show here.
"""

from __future__ import annotations

import collections
import itertools
from typing import Any

import attrs

from bkframe import Position
from tests.faults.checks import CheckResult, clock

#: Rounding: deadlines are whole milliseconds, record times a tenth of one.
SLACK_S = 0.002
KINDS = (
    "sub-stuck", "sub-lost", "sub-wrong-record", "sub-acked-redelivered", "sub-key-overlap", "sub-key-order", "sub-count",
    "sub-counters",
)


@attrs.frozen
class Receipt:
    src: str
    pos: Position
    key: str
    count: int
    #: When the consumer recorded it.
    t: float
    #: When the owner leased it (its deadline less the lease time).
    leased_at: float
    deadline: float
    producer: str | None
    seq: int | None


def check_subscriptions(records: list[dict[str, Any]], result: CheckResult, lease_s: float) -> None:
    records = sorted(records, key=lambda r: r["t"])
    appends: dict[Position, dict[str, Any]] = {}
    receipts: list[Receipt] = []
    #: position -> (sent, returned) of each ack or nack of it (inf: never returned). The owner
    #: cannot act on one before it was sent, nor after it returned.
    settling: dict[Position, list[tuple[float, float]]] = collections.defaultdict(list)
    sent: dict[tuple[str, Position], float] = {}
    #: position -> (time, who) of the first ack that returned.
    acked: dict[Position, tuple[float, str]] = {}
    #: consumer -> when it ended: killed by the harness, or leaving.
    ended: dict[str, float] = {}
    drained: dict[str, Any] | None = None
    stuck: dict[str, Any] | None = None
    for r in records:
        ev = r["ev"]
        if not ev.startswith("sub-"):
            continue
        if ev == "sub-append":
            appends[Position.parse(r["pos"])] = r
        elif ev == "sub-recv":
            deadline = r["deadline"] / 1000 if r.get("deadline") is not None else r["t"] + lease_s
            receipts.append(Receipt(
                r["src"], Position.parse(r["pos"]), r["key"], r["count"], r["t"], min(r["t"], deadline - lease_s), deadline,
                r.get("producer"), r.get("seq"),
            ))
        elif ev in ("sub-acking", "sub-nacking"):
            sent[r["src"], Position.parse(r["pos"])] = r["t"]
        elif ev in ("sub-acked", "sub-ack-failed", "sub-nacked", "sub-nack-failed"):
            pos = Position.parse(r["pos"])
            if (r["src"], pos) in sent:
                settling[pos].append((sent.pop((r["src"], pos)), r["t"]))
            if ev == "sub-acked":
                acked.setdefault(pos, (r["t"], r["src"]))
        elif ev in ("sub-killed", "sub-closing"):
            who = r.get("consumer", r["src"])
            ended[who] = min(ended.get(who, r["t"]), r["t"])
        elif ev == "sub-drained":
            drained = r
        elif ev == "sub-drain-stuck":
            stuck = r
    for (_, pos), t in sent.items():
        settling[pos].append((t, float("inf")))
    # A consumer that ended otherwise (it crashed, or passed a call's deadline and exited)
    # died after its last record: the latest moment it surely still held its leases (an
    # owner on a bookie ends them when the connection drops).
    last: dict[str, float] = {}
    for r in records:
        last[r["src"]] = r["t"]
    for src in {x.src for x in receipts} - set(ended):
        ended[src] = last[src]
    if not appends and not receipts:
        return
    stats = result.stats
    stats["sub_appended"] += len(appends)
    stats["sub_received"] += len(receipts)
    stats["sub_redelivered"] += sum(1 for x in receipts if x.count > 1)
    stats["sub_acked"] += len(acked)
    stats["sub_drain_received"] += sum(1 for x in receipts if x.src == "drain")

    # 1. the drain emptied it
    if drained is None:
        why = (f"backlog {stuck['backlog']}, in flight {stuck['in_flight']} after {stuck['seconds']} s"
               + (f"; last error {stuck['error']}" if stuck.get("error") else "")) if stuck else "the drain recorded no end"
        result.fail("sub-stuck", f"the drain did not empty the subscription: {why}")
    else:
        stats["sub_epoch"] = drained["epoch"]
        stats["sub_drain_ms"] = int(drained["seconds"] * 1000)
        check_counters(drained, receipts, result)

    by_pos: dict[Position, list[Receipt]] = collections.defaultdict(list)
    for x in receipts:
        by_pos[x.pos].append(x)
    for xs in by_pos.values():
        xs.sort(key=lambda x: (x.leased_at, x.count))

    # 2. nothing lost
    for pos, a in sorted(appends.items()):
        if pos not in by_pos:
            result.fail(
                "sub-lost", f"{pos} (key {a['key']}, seq {a['seq']}) was appended ({a['src']}, {clock(a['t'])}) but "
                            f"never delivered" + (", though the drain emptied the subscription" if drained else ""),
            )

    # 3. the right record
    for pos, xs in sorted(by_pos.items()):
        appended = appends.get(pos)
        if appended is None:
            continue  # appended, its return not seen (the producer lost the log): any record
        for x in xs:
            if x.key != appended["key"] or x.seq != appended["seq"] or x.producer != appended["src"]:
                result.fail(
                    "sub-wrong-record", f"{pos}: {x.src} received key {x.key} seq {x.seq} of {x.producer}, but "
                                        f"{appended['src']} appended key {appended['key']} seq {appended['seq']} there",
                )

    # 4. no acked record leased again
    for pos, xs in sorted(by_pos.items()):
        if pos not in acked:
            continue
        t_ack, who = acked[pos]
        for x in xs:
            if x.leased_at > t_ack + SLACK_S:
                result.fail(
                    "sub-acked-redelivered", f"{pos} (key {x.key}) was leased again to {x.src} at {clock(x.leased_at)} "
                                             f"(delivery {x.count}) after {who}'s ack of it returned at {clock(t_ack)}",
                )

    # 7. delivery counts grow
    for pos, xs in sorted(by_pos.items()):
        for before, after in itertools.pairwise(xs):
            if after.count <= before.count:
                result.fail(
                    "sub-count", f"{pos}: delivered to {before.src} as delivery {before.count} (leased at "
                                 f"{clock(before.leased_at)}), then to {after.src} as delivery {after.count} "
                                 f"(leased at {clock(after.leased_at)}): the count did not grow",
                )
        if xs[0].count < 1:
            result.fail("sub-count", f"{pos}: first received with delivery count {xs[0].count}")

    # 5. and 6. per key
    by_key: dict[str, list[Receipt]] = collections.defaultdict(list)
    for x in receipts:
        by_key[x.key].append(x)
    for key, xs in sorted(by_key.items()):
        xs.sort(key=lambda x: (x.leased_at, x.pos))
        holder: Receipt | None = None
        held_until = float("-inf")
        why = ""
        for x in xs:
            if holder is not None and x.leased_at < held_until - SLACK_S:
                result.fail(
                    "sub-key-overlap", f"key {key}: {x.pos} was leased to {x.src} at {clock(x.leased_at)} while "
                                       f"{holder.pos} was still leased to {holder.src} (leased at "
                                       f"{clock(holder.leased_at)}, held until at least {clock(held_until)}: {why})",
                )
            end, end_why = hold_end(x, settling, ended)
            if end > held_until:
                holder, held_until, why = x, end, end_why
        first: dict[Position, Receipt] = {}
        for x in xs:
            first.setdefault(x.pos, x)
        in_order = sorted(first.values(), key=lambda x: (x.leased_at, x.pos))
        for before, after in itertools.pairwise(in_order):
            if after.pos < before.pos:
                result.fail(
                    "sub-key-order", f"key {key}: {after.pos} was first delivered (to {after.src}, leased at "
                                     f"{clock(after.leased_at)}) after {before.pos} (to {before.src}, leased at "
                                     f"{clock(before.leased_at)}), against the log's order",
                )


def check_counters(drained: dict[str, Any], receipts: list[Receipt], result: CheckResult) -> None:
    """8. the totals the drain read (the subscription emptied: every record acked)."""
    positions = len({x.pos for x in receipts})
    again = sum(1 for x in receipts if x.count > 1)
    acked, delivered, redelivered = drained["acked"], drained["delivered"], drained["redelivered"]
    wrong = []
    if acked != positions:
        wrong.append(f"acked {acked}, but {positions} records were delivered and the subscription is empty")
    if delivered - redelivered != acked:
        wrong.append(f"first deliveries (delivered {delivered} - redelivered {redelivered}) are not the {acked} acked")
    if delivered < len(receipts) or redelivered < again:
        wrong.append(f"consumers received {len(receipts)} deliveries, {again} of them again, more than delivered "
                     f"{delivered} and redelivered {redelivered}")
    if wrong:
        result.fail(
            "sub-counters", f"the subscription's totals after the drain (owner epoch {drained['epoch']}): {'; '.join(wrong)}"
        )


def hold_end(x: Receipt, settling: dict[Position, list[tuple[float, float]]], ended: dict[str, float]) -> tuple[float, str]:
    """The earliest the owner may have ended the lease ``x`` received, and why then."""
    ends = [(x.deadline, "its deadline")]
    # Every ack or nack of the record that had not returned when this lease began counts,
    # even one sent before: a late one (its process hung with it, or it waited for a
    # failover) may be applied after this lease began, and acking a record whose lease moved
    # on is allowed. One that returned before cannot be applied later.
    sent = [t for t, returned in settling.get(x.pos, ()) if returned >= x.leased_at - SLACK_S]
    if sent:
        ends.append((min(sent), "an ack or nack of it was sent"))
    if x.src in ended and ended[x.src] >= x.t - SLACK_S:
        ends.append((ended[x.src], f"{x.src} ended"))
    return min(ends)
