"""After a run (every fault healed, every bookie up): what the cluster holds against what the
workers recorded.

Per ledger:

1. **Nothing promised is lost.** Open it with recovery (an unclosed ledger is recovered now)
   and read every entry up to the closed end through the client. PD_JOURNAL and
   BYPASS_JOURNAL: every acknowledged entry is at or below the end and reads back right
   (BYPASS ledgers keep what they acknowledged because the schedule never lets A bookies of
   one ensemble lose it together). VD_JOURNAL: every entry covered by a returned ``sync()``
   is; after a ``close()`` that returned, every acknowledged entry is (close-to-open).
2. **No two readers see different bytes.** Every entry up to the end is read again from
   every replica of its write set with the low-level bookie client: each copy a bookie
   returns must carry a valid digest and the expected payload (payloads are derived from
   seed, writer, ledger and entry, so "expected" is known). Missing copies are counted
   (under-replication is no loss while another copy exists). Readers recorded what they
   read during the run, checked the same way.
3. **The closed end never moves.** Every end recorded (writer's close, each recovery, what
   readers saw) equals the end found now, and a second open from a fresh client agrees.
   No reader ever saw a LAC above it.
4. **A fenced writer adds nothing.** No entry beyond the end was acknowledged, a failed
   handle refused the next append, and for a ledger recovery closed, an ordinary ADD of
   entry end+1 is refused by enough bookies that it could never be acknowledged (fewer
   than A of its write set accept it).

Every step has a deadline; a check that passes it is a failure naming the ledger and step.
"""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

import bkframe
from bkframe.client.distribution import write_set
from bkframe.client.entry_format import Digester, DigestMismatchError
from bkframe.core.ledger_keys import master_key
from bkframe.proto.codes import Status
from tests.faults.payloads import PASSWORD, digest, expected_from_custom

if TYPE_CHECKING:
    from bkframe.testing.cluster import Cluster

#: The custom metadata key of a subscription's state ledgers (bkframe.subscriptions.dispatcher).
SUBSCRIPTION_STATE_KEY = "bkframe.subscription"
#: Ledgers checked at once.
PARALLEL = 4
READ_CHUNK = 200


@attrs.define
class LedgerHistory:
    """What the records say about one ledger."""

    ledger_id: int
    creators: list[str] = attrs.Factory(list)
    ledger_type: str = ""
    quorums: tuple[int, int, int] = (0, 0, 0)
    #: entry -> (hash, time, writer)
    acks: dict[int, tuple[str, float, str]] = attrs.Factory(dict)
    synced_upto: int = -1
    closed_by_writer: bool = False
    #: A recovery (a worker's, or the final check's) found it open and closed it, fencing
    #: its bookies. Only then must the old writer's adds be refused: a ledger whose writer's
    #: close() succeeded but was not recorded (the run stopped in it) was never fenced.
    closed_by_recovery: bool = False
    #: (end, who, event) for every recorded end.
    ends: list[tuple[int, str, str]] = attrs.Factory(list)
    #: First time a recovery (of any worker) returned.
    recovered_at: float | None = None
    #: The last fragment's ensemble when the first recovery that found it open returned:
    #: the bookies that recovery fenced, which the old writer knew.
    fenced_ensemble: tuple[str, ...] = ()
    writer_failures: list[str] = attrs.Factory(list)
    lac_seen: tuple[int, str] = (-1, "")


@attrs.define
class CheckResult:
    failures: list[str] = attrs.Factory(list)
    stats: collections.Counter[str] = attrs.Factory(collections.Counter)
    #: Entries acknowledged per ledger type (PD/BYPASS: confirmed; VD: acked) and VD synced.
    acked: collections.Counter[str] = attrs.Factory(collections.Counter)
    ledgers: collections.Counter[str] = attrs.Factory(collections.Counter)
    #: The categories of failure, counted (lost = 0 ... in the summary).
    kinds: collections.Counter[str] = attrs.Factory(collections.Counter)

    def fail(self, kind: str, message: str) -> None:
        self.kinds[kind] += 1
        self.failures.append(f"[{kind}] {message}")

    def summary_lines(self) -> list[str]:
        s = self.stats
        by_type = ", ".join(f"{k} {v}" for k, v in sorted(self.ledgers.items()))
        acked = ", ".join(
            f"{k} {v}" + (f" (covered by sync/close {s['vd_covered']})" if k == "VD_JOURNAL" else "")
            for k, v in sorted(self.acked.items())
        )
        kinds = ("lost", "wrong-bytes", "end-moved", "fenced-writer-added", "ack-beyond-close", "unreadable", "hung",
                 "recovery")
        # A subscription run's kinds (sub_checks.py) have a line of their own.
        sub_kinds = tuple(k for k in self.kinds if k.startswith("sub-"))
        sub = [
            f"subscription: records appended {s['sub_appended']}, received {s['sub_received']} (redeliveries "
            f"{s['sub_redelivered']}, by the drain {s['sub_drain_received']}), acked {s['sub_acked']}; drained in "
            f"{s['sub_drain_ms'] / 1000:.1f} s at owner epoch {s['sub_epoch']}"
            + ("".join(f" {k}={self.kinds[k]}" for k in sub_kinds) or ", no breach")
        ] if s["sub_appended"] or s["sub_received"] else []
        tab_kinds = tuple(k for k in self.kinds if k.startswith("tab-"))
        tab = [
            f"compaction: records appended {s['tab_appended']}, compactions {s['tab_compactions']} (failed or cut "
            f"short {s['tab_compact_errors']}) dropping {s['tab_dropped']} records ({s['tab_tombstones_dropped']} "
            f"tombstones), segments offloaded {s['tab_offloaded']}, table reads {s['tab_reads']}; "
            f"{s['tab_log_records']} records left"
            + ("".join(f" {k}={self.kinds[k]}" for k in tab_kinds) or ", no breach")
        ] if s["tab_appended"] else []
        known = (*kinds, *sub_kinds, *tab_kinds)
        return [
            f"ledgers {sum(self.ledgers.values())} ({by_type}): closed by their writer {s['closed_by_writer']}, "
            f"by recovery {s['closed_by_recovery']}",
            f"entries acknowledged {sum(self.acked.values())} ({acked}); VD acknowledged, never synced and "
            f"dropped by recovery {s['vd_unsynced_dropped']}; appends refused or failed once close() began "
            f"{s['appends_after_close']}",
            f"entries read back {s['entries_read']}, replica copies compared {s['copies_checked']} "
            f"(missing copies {s['copies_missing']}), entries readers read during the run {s['reader_entries']}, "
            f"fence probes {s['fence_probes']}",
            " ".join(f"{k}={self.kinds[k]}" for k in kinds)
            + (f" other={sum(v for k, v in self.kinds.items() if k not in known)}" if set(self.kinds) - set(known)
               else ""),
            *sub,
            *tab,
        ]


def build_histories(records: list[dict[str, Any]], result: CheckResult) -> dict[int, LedgerHistory]:
    hist: dict[int, LedgerHistory] = {}

    def h(ledger: int) -> LedgerHistory:
        if ledger not in hist:
            hist[ledger] = LedgerHistory(ledger)
        return hist[ledger]

    for r in sorted(records, key=lambda r: r["t"]):
        ev, src = r["ev"], r["src"]
        if ev == "hung":
            result.fail(
                "hung", f"{src}: {r['what']} did not finish in {r['seconds']:.0f} s (gave up at {clock(r['t'])})"
            )
            continue
        if "ledger" not in r:
            continue
        x = h(r["ledger"])
        if ev == "created":
            x.creators.append(src)
            x.ledger_type = r["type"]
            x.quorums = (r["e"], r["w"], r["a"])
        elif ev == "ack":
            if r["entry"] in x.acks and x.acks[r["entry"]][2] != src:
                result.fail("wrong-bytes", f"ledger {x.ledger_id}: entry {r['entry']} acknowledged to two writers")
            x.acks[r["entry"]] = (r["hash"], r["t"], src)
        elif ev == "ack-mismatch":
            result.fail("other", f"ledger {x.ledger_id}: {src} got entry id {r['entry']} where {r['expected']} was due")
        elif ev == "synced":
            x.synced_upto = max(x.synced_upto, r["upto"])
        elif ev == "closed":
            x.closed_by_writer = True
            x.ends.append((r["last"], src, "close() returned"))
        elif ev == "recovered":
            x.ends.append((r["last"], src, "recovery returned"))
            x.closed_by_recovery = x.closed_by_recovery or bool(r.get("was_open", True))
            x.recovered_at = r["t"] if x.recovered_at is None else min(x.recovered_at, r["t"])
            if r.get("was_open", True) and r.get("ensemble") and not x.fenced_ensemble:
                x.fenced_ensemble = tuple(r["ensemble"])
        elif ev == "closed-seen":
            x.ends.append((r["last"], src, "a reader saw it closed"))
        elif ev == "lac-seen":
            if r["lac"] > x.lac_seen[0]:
                x.lac_seen = (r["lac"], src)
        elif ev in ("append-refused", "append-failed"):
            result.stats["appends_after_close"] += 1
        elif ev == "writer-failed":
            x.writer_failures.append(r["error"])
        elif ev == "append-after-failure" and r["ok"]:
            result.fail(
                "fenced-writer-added",
                f"ledger {x.ledger_id}: after its handle failed, {src}'s next append succeeded (entry {r['entry']})",
            )
        elif ev == "read":
            result.stats["reader_entries"] += r["last"] - r["first"] + 1
        elif ev == "read-mismatch":
            result.fail(
                "wrong-bytes",
                f"ledger {x.ledger_id}: {src} read entry {r['entry']} with hash {r['hash']}, expected {r['expected']}",
            )
        elif ev == "read-absent":
            result.fail(
                "lost",
                f"ledger {x.ledger_id}: {src} was told no replica holds an entry of {r['first']}..{r['last']} while "
                f"the LAC was {r['lac']}: {r['error']}",
            )
        elif ev == "gave-up":
            result.fail("recovery", f"ledger {x.ledger_id}: {src} could not recover it during the run: {r['error']}")
    for x in hist.values():
        if len(x.creators) > 1:
            result.fail("wrong-bytes", f"ledger id {x.ledger_id} was handed to several writers: {x.creators}")
    return hist


async def check_cluster(cluster: Cluster, records: list[dict[str, Any]], call_timeout: float) -> CheckResult:
    """``cluster``: its bookies should all run; any that does not is named in the failures
    (and recovery retries only briefly, as ledgers on it may not be decidable)."""
    result = CheckResult()
    down = [b.bookie_id for b in cluster.bookies if not b.running]
    if down:
        result.fail("other", f"bookies {down} were not running during the final checks: failures of ledgers on "
                             f"them may follow from that")
    retry_s = 10.0 if down else call_timeout
    hist = build_histories(records, result)
    async with bkframe.open_client(cluster.metadata) as client:
        with trio.fail_after(call_timeout):
            ids = await client.list_ledgers()
        for ledger in sorted(set(hist) - set(ids)):
            if hist[ledger].creators:
                result.fail(
                    "lost", f"ledger {ledger} was created ({hist[ledger].creators}) but is not in the metadata store"
                )
        limiter = trio.CapacityLimiter(PARALLEL)
        # The "second open" comes from another client, as a later reader would.
        async with bkframe.open_client(cluster.metadata) as second, trio.open_nursery() as nursery:
            for ledger in sorted(ids):
                nursery.start_soon(check_one, client, second, hist.get(ledger) or LedgerHistory(ledger), result,
                                   retry_s, limiter)
    return result


async def check_one(
    client: bkframe.Client,
    second: bkframe.Client,
    x: LedgerHistory,
    result: CheckResult,
    call_timeout: float,
    limiter: trio.CapacityLimiter,
) -> None:
    async with limiter:
        step = "start"
        try:
            # Generous: one step may hold many calls (a recovery, a read of thousands).
            with trio.fail_after(call_timeout * 3):
                if not x.creators and await is_log_segment(client, x.ledger_id):
                    result.stats["log_segments"] += 1
                    # A named log's (the soak's, a subscription run's) or a subscription's state
                    # ledger (its own password; the owner's to recover): their checks are
                    # tests/soak/log_checks.py and sub_checks.py.
                    return
                step = "recovery (open with recovery)"
                end, md = await recover(client, x, result, call_timeout)
                if md is None:
                    return
                step = "reading every entry up to the end"
                await check_entries(client, x, md, end, result)
                step = "reading every replica"
                await check_replicas(client, md, end, result)
                if not x.closed_by_writer and x.closed_by_recovery:
                    step = "fence probe"
                    await probe_fence(client, md, end, result, x.fenced_ensemble)
                step = "second open"
                await check_second_open(second, x, end, result)
        except trio.TooSlowError:
            result.fail("hung", f"ledger {x.ledger_id}: the final check hung at: {step}")


async def is_log_segment(client: bkframe.Client, ledger: int) -> bool:
    """A ledger no worker recorded: a named log's segment (made by a log writer) or a
    subscription's state ledger (made by its owner), or not."""
    try:
        md = await client.ledger_metadata(ledger)
    except bkframe.NoSuchLedgerError:
        return True  # a log's garbage, deleted since it was listed
    if SUBSCRIPTION_STATE_KEY in md.custom:
        return True
    return all(md.custom.get(k) == v for k, v in bkframe.ENVELOPE_CUSTOM.items())


async def recover(
    client: bkframe.Client, x: LedgerHistory, result: CheckResult, call_timeout: float
) -> tuple[int, Any]:
    ledger = x.ledger_id
    before = await client.ledger_metadata(ledger)
    handle = None
    last_error: Exception | None = None
    with trio.move_on_after(call_timeout):
        while handle is None:
            try:
                handle = await client.open_ledger(ledger, password=PASSWORD, recovery=True)
            except bkframe.BKError as e:
                last_error = e
                await trio.sleep(0.5)
    if handle is None:
        result.fail(
            "recovery",
            f"ledger {ledger} ({before.ledger_type}, state {before.state.value}): recovery with every bookie up "
            f"did not succeed in {call_timeout:.0f} s; last error: {type(last_error).__name__}: {last_error}",
        )
        return -1, None
    md = handle.metadata
    end = md.last_entry_id
    kind = md.ledger_type
    result.ledgers[kind] += 1
    result.stats["closed_by_writer" if x.closed_by_writer else "closed_by_recovery"] += 1
    if not before.closed:
        x.closed_by_recovery = True
        x.ends.append((end, "final check", "recovery returned"))
    else:
        x.ends.append((end, "final check", "metadata says closed"))

    # 3. the end never moves
    for other, who, how in x.ends:
        if other != end:
            result.fail("end-moved", f"ledger {ledger}: {who} recorded end {other} ({how}); the ledger's end is {end}")
    if x.lac_seen[0] > end:
        result.fail(
            "end-moved", f"ledger {ledger}: {x.lac_seen[1]} saw LAC {x.lac_seen[0]}, above the closed end {end}"
        )

    # 1. nothing promised is lost; 4. nothing acknowledged beyond the end
    result.acked[kind] += len(x.acks)
    beyond = sorted(e for e in x.acks if e > end)
    must = max(x.acks, default=-1)  # PD, BYPASS: every acknowledged entry
    if kind == "VD_JOURNAL":
        # What a returned sync() covers, and after a returned close() everything acknowledged.
        must = max(x.synced_upto, must if x.closed_by_writer else -1)
        result.stats["vd_covered"] += must + 1
    quorums = "/".join(map(str, x.quorums))
    if x.closed_by_writer and beyond:
        result.fail(
            "ack-beyond-close",
            f"ledger {ledger} ({kind} E/W/A={quorums}): its writer's close() returned end {end}, but entries "
            f"{compress(beyond)} were acknowledged to it too",
        )
    elif must > end:
        late = [e for e in beyond if x.recovered_at is not None and x.acks[e][1] > x.recovered_at]
        promise = "synced (sync() returned)" if kind == "VD_JOURNAL" else "acknowledged"
        result.fail(
            "fenced-writer-added" if late else "lost",
            f"ledger {ledger} ({kind} E/W/A={quorums}) ends at {end}, but entries up to {must} were {promise}"
            + (f": {compress(beyond)} beyond the end" if beyond else "")
            + (f"; {compress(late)} acknowledged after a recovery had returned" if late else ""),
        )
    elif beyond:
        result.stats["vd_unsynced_dropped"] += len(beyond)
    return end, md


async def check_entries(client: bkframe.Client, x: LedgerHistory, md: Any, end: int, result: CheckResult) -> None:
    ledger = x.ledger_id
    if end < 0:
        return
    handle = await client.open_ledger(ledger, password=PASSWORD, recovery=False)
    for first in range(0, end + 1, READ_CHUNK):
        last = min(end, first + READ_CHUNK - 1)
        try:
            entries = await handle.read(first, last)
        except bkframe.BKError as e:
            result.fail("unreadable", f"ledger {ledger} ({md.ledger_type}): entries {first}..{last} <= end {end} "
                                      f"cannot be read: {type(e).__name__}: {e}")
            continue
        for entry in entries:
            result.stats["entries_read"] += 1
            want = expected_from_custom(md.custom, ledger, entry.entry_id)
            if want is not None and entry.payload != want:
                result.fail("wrong-bytes", f"ledger {ledger}: entry {entry.entry_id} reads {digest(entry.payload)}, "
                                           f"expected {digest(want)}")
            ack = x.acks.get(entry.entry_id)
            if ack is not None and ack[0] != digest(entry.payload):
                result.fail("wrong-bytes", f"ledger {ledger}: entry {entry.entry_id} reads {digest(entry.payload)}, "
                                           f"its writer was acknowledged {ack[0]}")


async def check_replicas(client: bkframe.Client, md: Any, end: int, result: CheckResult) -> None:
    ledger = md.ledger_id
    digester = Digester.for_ledger(md.digest_type, PASSWORD)
    # Every read submitted first, then answers collected: one round trip per bookie.
    pendings: list[tuple[int, str, Any]] = []
    for entry_id in range(end + 1):
        ensemble = md.ensemble_at(entry_id)
        for idx in write_set(entry_id, len(ensemble), md.write_quorum):
            bookie_id = ensemble[idx]
            try:
                conn = await client.pool.get(bookie_id)
                pendings.append((entry_id, bookie_id, conn.submit_read(ledger, entry_id, master_key=master_key(PASSWORD))))
            except ConnectionError as e:
                pendings.append((entry_id, bookie_id, e))
    # Problems grouped by (kind, bookie, what): one line per group, its entries compressed.
    problems: dict[tuple[str, str, str], list[int]] = collections.defaultdict(list)
    for entry_id, bookie_id, pending in pendings:
        if isinstance(pending, Exception):
            problems["unreadable", bookie_id, f"bookie unreachable after the run: {pending}"].append(entry_id)
            continue
        try:
            response = await pending.wait()
        except ConnectionError as e:
            problems["unreadable", bookie_id, f"connection failed: {e}"].append(entry_id)
            continue
        if response.status in (Status.NO_ENTRY, Status.NO_LEDGER):
            result.stats["copies_missing"] += 1
            continue
        if response.status != Status.OK:
            message = (response.message or bytes(response.data[:300]).decode(errors="replace"))[:300]
            problems["unreadable", bookie_id, f"{response.status.name} although every bookie is up and out of "
                                              f"limbo; the first says: {message}"].append(entry_id)
            continue
        result.stats["copies_checked"] += 1
        try:
            _, _, data = digester.decode(ledger, entry_id, response.data)
        except DigestMismatchError:
            problems["wrong-bytes", bookie_id, "the copy fails its digest"].append(entry_id)
            continue
        want = expected_from_custom(md.custom, ledger, entry_id)
        if want is not None and data != want:
            problems["wrong-bytes", bookie_id, f"holds other bytes ({digest(data)}, expected {digest(want)} for "
                                               f"the first)"].append(entry_id)
    for (kind, bookie_id, what), entries in problems.items():
        result.fail(kind, f"ledger {ledger} ({md.ledger_type}) on {bookie_id}: entries {compress(entries)}: {what}")


async def probe_fence(
    client: bkframe.Client, md: Any, end: int, result: CheckResult, fenced: tuple[str, ...] = ()
) -> None:
    """An ordinary ADD of entry end+1, as the old writer would send it, to each bookie of
    its write set in the ensemble the recovery fenced (``fenced``; else the last fragment's
    now): fewer than A of them may take it. Not today's last fragment: autorecovery may have
    replaced those bookies since by copies that were never fenced -- a soak saw all three
    replaced -- which the old writer never knew (its ensemble change would meet a closed
    ledger), as in BookKeeper."""
    ledger = md.ledger_id
    digester = Digester.for_ledger(md.digest_type, PASSWORD)
    type_id = client.context.ledger_types.named(md.ledger_type).type_id
    probe = b"fence probe: must never be acknowledged"
    data = digester.encode(ledger, end + 1, end, md.length + len(probe), probe)
    ensemble = fenced or md.fragments[-1][1]
    accepted = []
    for idx in write_set(end + 1, len(ensemble), md.write_quorum):
        bookie_id = ensemble[idx]
        try:
            conn = await client.pool.get(bookie_id)
            response = await conn.add(
                ledger, end + 1, data, master_key=master_key(PASSWORD), ledger_type=type_id, lac=end
            )
        except ConnectionError:
            continue
        if response.status == Status.OK:
            accepted.append(bookie_id)
    result.stats["fence_probes"] += 1
    if len(accepted) >= md.ack_quorum:
        result.fail(
            "fenced-writer-added",
            f"ledger {ledger} ({md.ledger_type}) closed by recovery at {end}: an ordinary ADD of entry {end + 1} "
            f"was accepted by {accepted}, an ack quorum ({md.ack_quorum}): the old writer could still add",
        )


async def check_second_open(other: bkframe.Client, x: LedgerHistory, end: int, result: CheckResult) -> None:
    handle = await other.open_ledger(x.ledger_id, password=PASSWORD, recovery=True)
    stored = (await other.ledger_metadata(x.ledger_id)).last_entry_id
    if handle.lac != end or stored != end or not handle.closed:
        result.fail(
            "end-moved",
            f"ledger {x.ledger_id}: a second open from a fresh client sees end {handle.lac} (metadata {stored}, "
            f"closed={handle.closed}), the first saw {end}",
        )


def clock(t: float) -> str:
    """A record's time as the bookie and worker logs print it."""
    return time.strftime("%H:%M:%S", time.localtime(t)) + f",{int(t % 1 * 1000):03d}"


def compress(ids: list[int]) -> str:
    """[1, 2, 3, 7] -> "1..3, 7" (at most a few runs)."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in runs[:8])
    return text + (f", ... ({len(ids)} in all)" if len(runs) > 8 else "")
