"""The fault schedule: a pure function of (seed, run config), so a failing seed reproduces.

The whole schedule is drawn up front from ``random.Random(seed)``: which fault, on which
bookie or writer, when, and for how long. What it cannot fix in advance is timing inside
the cluster (which entries are in flight when a fault lands), so a rerun of a seed replays
the same faults in the same order at about the same moments, not the same interleaving.

Rules that keep every loss a defect (none makes a loss legitimate):

* at most ``max_down`` bookies are faulty (killed, hung, powered off, disk full) at once;
* a power cut only loses what a bookie had not fsynced: nothing acknowledged of PD_JOURNAL,
  nothing synced of VD_JOURNAL; a BYPASS_JOURNAL entry is lost only if A bookies of its
  write set lose it together (docs/ledger-types.md). So when BYPASS ledgers are in the run,
  an *unclean* fault (kill -9 or power cut: the bookie restarts with its BYPASS ledgers
  fenced and in limbo) happens only while no other bookie is faulty, and the run goes on
  only once the bookie has left limbo (the executor waits). Two bookies of one ensemble in
  limbo at once could lose an entry (two power cuts) or, even after a harmless kill -9,
  leave an open ledger unrecoverable for good (each answers UNKNOWN, recovery never
  reaches W - A + 1 explicit negatives): BP-46 accepts that, so the schedule avoids it.
* hangs (SIGSTOP) last less than the workers' call deadline, so a call that outlives its
  deadline is a hang of the system, not of the schedule;
* partition runs (``partitions=True``: every bookie, writer, reader and recovery on a
  simulated host of its own) add two network faults, counted like the others per bookie:
  a bookie's host isolated (its process runs on, reaching nobody) and a writer's host cut
  from one bookie's; neither loses anything on disk, so neither is "unclean". Partitions
  last less than the call deadline, as hangs do.
* partition runs also put a link proxy in front of every bookie (bkframe.testing.faults.link_proxy)
  and draw link faults on it, for every peer of the bookie or for one writer's link: a slow
  link (latency and jitter), a narrow one (a bandwidth cap), a blackhole, frames torn
  mid-way, resets. Each counts like the others per bookie (a blackholed or reset bookie is as
  gone as a hung one; a slow one may pass the add timeout), none is unclean, and each ends
  before the call deadline (``link_s``);
* partition runs keep their metadata in a 3-member ZooKeeper ensemble on hosts of its own,
  and draw faults of its members: a member killed (kill -9) and restarted, the leader cut from
  the other members, a member cut from every client host (bookies and workers). At most one
  member is faulty at a time, and the executor injects the next member fault only once all
  three serve again, so two of the three -- a majority -- always serve, and every fault is
  healed. Member faults are counted apart from the bookies' (``max_down`` is about bookies).
* a clock fault moves a bookie's wall clock (an hour ahead or behind, or twice as fast) and
  puts it right later; it is counted like the others per bookie, though the bookie serves
  on: nothing of a bookie's may depend on its wall clock being right.
* compaction runs (``compaction=True``: a compacted log, its writer, a compactor and a table
  reader, compaction_worker.py) add one fault: the compactor killed (kill -9) wherever it is
  and another started at once. It does not count against ``max_down``.
* subscription runs (``subscriptions=True``: a producer appending keyed records to a log and
  consumers of its key_shared subscription, sub_worker.py) add two faults of the consumers:
  one killed (kill -9) and replaced at once, and one hung (SIGSTOP) and resumed later, for
  less than the call deadline, as bookies are. One fault per consumer at a time (a hung one
  is resumed before it is killed or hung again); neither counts against ``max_down``. Only
  configs that give them a weight draw them, so every other config's schedule is unchanged.
"""

from __future__ import annotations

import enum
import random
from typing import Any

import attrs


class Fault(enum.Enum):
    KILL = "kill"  # kill -9, restart later
    HANG = "hang"  # SIGSTOP, SIGCONT later
    POWER_CUT = "power_cut"  # kill -9 and drop what was not fsynced, restart later
    DISK_FULL = "disk_full"  # the disk-full layer (hook; see harness.py)
    WRITER_DEATH = "writer_death"  # kill -9 a writer; another client recovers its ledger
    RECOVER_WHILE_WRITING = "recover_while_writing"  # recover a ledger its writer still appends to
    ISOLATE = "isolate"  # a bookie's host reaches nobody (partition runs), reconnected later
    CUT = "cut"  # a writer's host and a bookie's cannot reach each other (partition runs), rejoined later
    # Link faults (partition runs), on a bookie's proxy for every peer or one writer's link; restored later:
    SLOW_LINK = "slow_link"  # latency and jitter each way
    NARROW_LINK = "narrow_link"  # a bandwidth cap
    BLACKHOLE = "blackhole"  # connections accepted, nothing answered, what is sent swallowed
    TORN_FRAME = "torn_frame"  # each connection's next write forwarded in part, then closed
    LINK_RESET = "link_reset"  # every connection reset (RST), new ones too
    # Faults of the ZooKeeper ensemble's members (partition runs), healed later:
    ZK_KILL = "zk_kill"  # kill -9 a member; restarted later
    ZK_CUT_LEADER = "zk_cut_leader"  # the leader (whichever it is then) cut from the other members
    ZK_CUT_CLIENTS = "zk_cut_clients"  # a member cut from every bookie and worker host
    CLOCK = "clock"  # a bookie's wall clock jumps an hour ahead or behind, or runs fast; put right later
    # Faults of the subscription's consumers (subscription runs); last, so that the draws of
    # configs without them stay as they were:
    CONSUMER_KILL = "consumer_kill"  # kill -9 a consumer; another takes its place at once
    CONSUMER_HANG = "consumer_hang"  # SIGSTOP a consumer; SIGCONT later ("consumer_resume")
    # The compactor of a compaction run, after those (the same reason):
    COMPACTOR_KILL = "compactor_kill"  # kill -9 the compactor wherever it is; another starts at once


LINK_FAULTS = (Fault.SLOW_LINK, Fault.NARROW_LINK, Fault.BLACKHOLE, Fault.TORN_FRAME, Fault.LINK_RESET)
BOOKIE_FAULTS = (Fault.KILL, Fault.HANG, Fault.POWER_CUT, Fault.DISK_FULL, Fault.ISOLATE, Fault.CUT, Fault.CLOCK, *LINK_FAULTS)
#: Faults of the metadata store's members: only in partition runs (a ZooKeeper ensemble).
STORE_FAULTS = (Fault.ZK_KILL, Fault.ZK_CUT_LEADER, Fault.ZK_CUT_CLIENTS)
#: Members of the partition runs' ZooKeeper ensemble.
STORE_MEMBERS = 3
#: Faults of the network between simulated hosts (and of what runs only there): only in partition runs.
NETWORK_FAULTS = (Fault.ISOLATE, Fault.CUT, *LINK_FAULTS, *STORE_FAULTS)
#: Faults of the subscription's consumers: only in subscription runs.
CONSUMER_FAULTS = (Fault.CONSUMER_KILL, Fault.CONSUMER_HANG)
#: Faults of the compactor: only in compaction runs.
COMPACTOR_FAULTS = (Fault.COMPACTOR_KILL,)
#: Faults after which a bookie restarts uncleanly (BYPASS ledgers fenced and in limbo).
UNCLEAN = (Fault.KILL, Fault.POWER_CUT)

#: What heals each bookie fault.
HEAL = {
    Fault.KILL: "restart", Fault.POWER_CUT: "restart", Fault.HANG: "resume", Fault.DISK_FULL: "disk_free",
    Fault.ISOLATE: "reconnect", Fault.CUT: "rejoin", Fault.CLOCK: "clock_right",
    **{f: "restore_link" for f in LINK_FAULTS},
    Fault.ZK_KILL: "zk_restart", Fault.ZK_CUT_LEADER: "zk_rejoin", Fault.ZK_CUT_CLIENTS: "zk_rejoin",
    Fault.CONSUMER_HANG: "consumer_resume",
}
HEALS = frozenset(HEAL.values())
#: The steps that act on a consumer of the subscription (harness.py).
CONSUMER_ACTIONS = frozenset({*(f.value for f in CONSUMER_FAULTS), HEAL[Fault.CONSUMER_HANG]})
#: The steps that act on the compactor (harness.py).
COMPACTOR_ACTIONS = frozenset(f.value for f in COMPACTOR_FAULTS)
#: What a clock fault does to the bookie's wall clock (bkframe.testing.faults.clocks), drawn per fault.
CLOCKS = ("ahead", "behind", "fast")

JOURNALED_LEDGERS = (
    ("PD_JOURNAL", 3, 3, 2),
    ("PD_JOURNAL", 3, 2, 2),
    ("VD_JOURNAL", 3, 3, 2),
)
ALL_LEDGERS = (*JOURNALED_LEDGERS, ("BYPASS_JOURNAL", 3, 3, 2), ("BYPASS_JOURNAL", 3, 2, 2))

DEFAULT_WEIGHTS = {
    Fault.KILL: 3.0,
    Fault.HANG: 2.0,
    Fault.POWER_CUT: 2.0,
    Fault.DISK_FULL: 1.5,
    Fault.WRITER_DEATH: 1.0,
    Fault.RECOVER_WHILE_WRITING: 1.0,
    Fault.CLOCK: 1.0,
}
#: A partition run's weights: the network faults as often as kills, link and store faults
#: often enough that every kind (and a clock fault) comes up in the suite's 34-fault partition run (seed 3).
PARTITION_WEIGHTS = {
    **DEFAULT_WEIGHTS, Fault.ISOLATE: 3.0, Fault.CUT: 3.0,
    **{f: 2.25 for f in LINK_FAULTS}, **{f: 1.0 for f in STORE_FAULTS},
}


#: The seeded suite's disk-full, clock and link faults last at most this long (the defaults:
#: 10-12 s), still past a client's add timeout (5 s) and a registration's TTL (6 s) at the top;
#: hangs and partitions keep 12 s, past the connect timeout (10 s). Faults come 0.2-0.6 s
#: apart. Seeds 1-3's schedules take 129 s in all instead of 161 s, with the same 34 faults
#: each and, in seed 3, every link and store fault kind and a clock fault (the test of the
#: schedule checks that: another length or gap draws other faults there).
SEEDED_TOP_S = 8.0
SEEDED_GAP_S = 0.4


@attrs.frozen
class RunConfig:
    seed: int
    #: Faults to inject (heals are not counted).
    events: int
    bookies: int = 5
    writers: int = 3
    readers: int = 1
    #: (ledger type, E, W, A) the writers draw from.
    ledgers: tuple[tuple[str, int, int, int], ...] = ALL_LEDGERS
    weights: tuple[tuple[Fault, float], ...] = tuple(DEFAULT_WEIGHTS.items())
    max_down: int = 2
    #: Mean seconds between two faults.
    mean_gap_s: float = 0.5
    #: How long a bookie stays down / hung, seconds (uniform in the range).
    down_s: tuple[float, float] = (0.5, 4.0)
    #: Long enough at the top to pass a client's per-request timeout, below the call deadline.
    hang_s: tuple[float, float] = (0.5, 12.0)
    disk_full_s: tuple[float, float] = (2.0, 10.0)
    #: Deadline of every client call in the workers.
    call_timeout_s: float = 60.0
    #: Seconds the writers run before the first fault and after the last heal.
    warmup_s: float = 2.0
    cooldown_s: float = 2.0
    #: ``[ledger_storage] large_entry_bytes`` of the bookies (0: off): big PD entries are
    #: then written once (docs/ledger-types.md).
    large_entry_bytes: int = 0
    #: Every process on a simulated host of its own, and the network faults in the mix.
    partitions: bool = False
    #: How long an isolation or a cut lasts: past a client's request timeout at the top.
    partition_s: tuple[float, float] = (1.0, 12.0)
    #: How long a bookie's clock stays wrong: past its registration TTL (6 s) at the top.
    clock_s: tuple[float, float] = (2.0, 12.0)
    #: How long a link fault or a cut of a ZooKeeper member lasts (past the add timeout at the top).
    link_s: tuple[float, float] = (1.0, 10.0)
    # The soak's additions (tests/soak): none of them changes the schedule a seed draws.
    #: Named-log writers (one log each) and log consumers committing durable cursors.
    log_writers: int = 0
    log_consumers: int = 0
    #: Standalone ``bkframe autorecovery`` processes (auditor candidates + replication workers).
    autorecovery: int = 0
    #: Extra arguments of every ledger writer (the soak paces 30 bookies' writers down).
    writer_args: tuple[str, ...] = ()
    #: How long a bookie may take to start (30 started at once on 2 cores take minutes).
    start_timeout_s: float = 60.0
    #: A schedule this far behind its times stops (and says so) instead of running on for ever.
    max_lag_s: float = 200.0
    #: ``"tmpfs"`` or ``"ext4"``: one bookie's data dir (the first the schedule fills, else
    #: the last) on a real filesystem of 16 MiB (bkframe.testing.faults.small_fs) instead of the
    #: disk-full layer; its disk_full is another file filling that filesystem to 100 %.
    #: Not with partitions.
    small_disk: str = ""
    #: A log of keyed records, a producer appending to it and ``consumers`` processes of its
    #: key_shared subscription (sub_worker.py), drained and judged after the run (sub_checks.py);
    #: the consumer faults are drawn only then (and only with a weight).
    subscriptions: bool = False
    consumers: int = 2
    #: The subscription's lease time: hangs of consumers run past it at the top, so that their
    #: records are leased again to the others.
    sub_lease_s: float = 3.0
    #: The ledger type of the subscription's state ledgers (what a confirmed ack survives).
    sub_state_ledger_type: str = "PD_JOURNAL"
    consumer_hang_s: tuple[float, float] = (0.5, 6.0)
    #: A compacted log of keyed records, its writer, a compactor (killed by the schedule's
    #: compactor faults, drawn only then and only with a weight) and a table reader
    #: (compaction_worker.py), judged after the run (compaction_checks.py).
    compaction: bool = False

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.max_down < self.bookies:
            raise ValueError(f"max_down must be in 0..{self.bookies - 1}, got {self.max_down}")
        if max(self.hang_s[1], self.partition_s[1], self.link_s[1], self.consumer_hang_s[1]) >= self.call_timeout_s:
            raise ValueError("hangs and partitions must end before the workers' call deadline, or each is reported as a hang")
        if self.small_disk and self.partitions:
            raise ValueError("small_disk runs have no simulated hosts (partitions=False)")
        if self.compaction and self.partitions:
            raise ValueError("compaction runs have no simulated hosts yet (partitions=False)")
        if any(e > self.bookies for _, e, _, _ in self.ledgers):
            raise ValueError(f"an ensemble is larger than the {self.bookies} bookies")

    @classmethod
    def for_seed(cls, seed: int, events: int) -> RunConfig:
        """The seeded suite's run: odd seeds mix all three ledger types (so kill -9 and
        power cuts come one at a time, see above), even seeds use the journaled types only
        (so up to ``max_down`` bookies crash or lose power together). Every third seed is a
        partition run: isolations and cuts mixed with the rest."""
        partitions = seed % 3 == 0
        seeded: dict[str, Any] = {
            "mean_gap_s": SEEDED_GAP_S, "disk_full_s": (2.0, SEEDED_TOP_S), "clock_s": (2.0, SEEDED_TOP_S),
            "link_s": (1.0, SEEDED_TOP_S),
        }
        if seed % 2 == 0:
            weights = PARTITION_WEIGHTS if partitions else DEFAULT_WEIGHTS
            return cls(seed=seed, events=events, ledgers=JOURNALED_LEDGERS, weights=tuple(weights.items()),
                       partitions=partitions, **seeded)
        # Kills and power cuts wait until no other bookie is faulty: fewer and shorter
        # hangs leave them room.
        weights = {**(PARTITION_WEIGHTS if partitions else DEFAULT_WEIGHTS), Fault.KILL: 3.0, Fault.POWER_CUT: 3.0,
                   Fault.HANG: 1.0}
        return cls(seed=seed, events=events, ledgers=ALL_LEDGERS, weights=tuple(weights.items()),
                   hang_s=(0.5, 6.0), partitions=partitions, **seeded)

    @property
    def has_bypass(self) -> bool:
        return any(kind == "BYPASS_JOURNAL" for kind, *_ in self.ledgers)

    def weight(self, fault: Fault) -> float:
        return dict(self.weights).get(fault, 0.0)


def with_subscriptions(config: RunConfig, weight: float = 2.0) -> RunConfig:
    """``config`` with a subscription and its consumers, their kills and hangs drawn among the
    other faults (``weight`` each; another schedule than ``config``'s, as its weights differ).
    No clock faults: the checks read a lease's time off its owner's clock (sub_checks.py), and
    an owner may run on a bookie."""
    weights = {**dict(config.weights), Fault.CONSUMER_KILL: weight, Fault.CONSUMER_HANG: weight}
    weights.pop(Fault.CLOCK, None)
    return attrs.evolve(config, subscriptions=True, weights=tuple(weights.items()))


def with_compaction(config: RunConfig, weight: float = 1.0) -> RunConfig:
    """``config`` with a compacted log, its writer, compactor and table reader, and kills of
    the compactor drawn among the other faults (``weight``; another schedule than
    ``config``'s, as its weights differ)."""
    return attrs.evolve(config, compaction=True, weights=(*config.weights, (Fault.COMPACTOR_KILL, weight)))


@attrs.frozen
class Step:
    """One action of the schedule, at ``at_s`` seconds after the workers started."""

    at_s: float
    #: A fault's value ("kill", "cut", "slow_link", "zk_kill", "clock", ...) or a heal of HEAL
    #: ("restart", "resume", "disk_free", "reconnect", "rejoin", "restore_link", "zk_restart",
    #: "zk_rejoin", "clock_right").
    action: str
    #: A bookie index for bookie actions, a writer slot for writer actions, a ZooKeeper
    #: member's for store actions (but "zk_cut_leader" cuts whichever member leads then).
    target: int
    #: Pairs a fault with its heal; counts faults.
    fault_id: int
    #: After a restart: wait until the bookie has no ledger in limbo before going on.
    wait_limbo: bool = False
    #: The writer slot a bookie is cut from ("cut", "rejoin"), or whose link a link fault is on
    #: (-1 there: every peer's link); -1 otherwise.
    peer: int = -1
    #: A clock fault's kind (one of CLOCKS); "" otherwise.
    clock: str = ""

    @property
    def is_fault(self) -> bool:
        return self.action not in HEALS

    def describe(self) -> str:
        writer = self.action in ("writer_death", "recover_while_writing")
        who = f"writer w{self.target}" if writer else f"bookie-{self.target}"
        if self.action in CONSUMER_ACTIONS:
            who = f"consumer c{self.target}"
        if self.action in COMPACTOR_ACTIONS:
            who = "the compactor"
        if self.action.startswith("zk_"):
            who = "the zk leader" if self.action == Fault.ZK_CUT_LEADER.value else f"zk member {self.target}"
        if self.peer >= 0:
            who += f" / writer w{self.peer}"
        if self.clock:
            who += f" {self.clock}"
        extra = " (then wait until out of limbo)" if self.wait_limbo else ""
        return f"t={self.at_s:7.2f}s #{self.fault_id:<3d} {self.action:<22s} {who}{extra}"


def make_schedule(config: RunConfig) -> list[Step]:
    """The steps of a run, in order; every bookie fault is healed by a later step."""
    rng = random.Random(config.seed)
    kinds = [
        f for f in Fault
        if config.weight(f) > 0 and (f in BOOKIE_FAULTS or f in STORE_FAULTS or config.writers > 0)
        and (config.partitions or f not in NETWORK_FAULTS) and (f is not Fault.CUT or config.writers > 0)
        and (f not in CONSUMER_FAULTS or (config.subscriptions and config.consumers > 0))
        and (f not in COMPACTOR_FAULTS or config.compaction)
    ]
    weights = [config.weight(f) for f in kinds]
    steps: list[Step] = []
    #: bookie -> (fault, heal time, fault id, writer slot of a cut or -1)
    active: dict[int, tuple[Fault, float, int, int]] = {}
    #: ZooKeeper member -> (fault, heal time, fault id): one at a time.
    members: dict[int, tuple[Fault, float, int]] = {}
    #: Hung consumer slot -> (resume time, fault id).
    hung: dict[int, tuple[float, int]] = {}
    t = config.warmup_s
    injected = 0
    attempts = 0

    def heal_until(now: float) -> None:
        for bookie, (fault, heal_at, fid, peer) in sorted(active.items(), key=lambda kv: kv[1][1]):
            if heal_at <= now:
                wait = fault in UNCLEAN and config.has_bypass
                steps.append(Step(heal_at, HEAL[fault], bookie, fid, wait_limbo=wait, peer=peer))
                del active[bookie]
        for member, (fault, heal_at, fid) in list(members.items()):
            if heal_at <= now:
                steps.append(Step(heal_at, HEAL[fault], member, fid))
                del members[member]
        for slot, (heal_at, fid) in list(hung.items()):
            if heal_at <= now:
                steps.append(Step(heal_at, HEAL[Fault.CONSUMER_HANG], slot, fid))
                del hung[slot]

    while kinds and injected < config.events:
        attempts += 1
        if attempts > 100 * (config.events + 10):
            raise RuntimeError(f"the rules leave no room for {config.events} faults: {config}")
        # The same draws every iteration, whatever is chosen: the rest of the schedule
        # does not shift when one choice changes.
        t += rng.uniform(0.2, 2 * config.mean_gap_s - 0.2)
        fault = rng.choices(kinds, weights)[0]
        pick = rng.random()
        length = rng.random()
        heal_until(t)
        if fault in BOOKIE_FAULTS:
            if len(active) >= config.max_down:
                continue
            if config.has_bypass:
                if any(f in UNCLEAN for f, _, _, _ in active.values()):
                    continue  # an unclean fault is alone until its bookie left limbo
                if fault in UNCLEAN and active:
                    continue
            free = [b for b in range(config.bookies) if b not in active]
            bookie = free[int(pick * len(free))]
            # A cut's writer comes from the same draw (no extra draw: other seeds' schedules stay put),
            # and so does a link fault's (or -1: every peer).
            peer = int(pick * len(free) * config.writers) % config.writers if fault is Fault.CUT else -1
            if fault in LINK_FAULTS:
                peer = int(pick * len(free) * (config.writers + 1)) % (config.writers + 1) - 1
            spans = {Fault.HANG: config.hang_s, Fault.DISK_FULL: config.disk_full_s,
                     Fault.ISOLATE: config.partition_s, Fault.CUT: config.partition_s, Fault.CLOCK: config.clock_s,
                     **{f: config.link_s for f in LINK_FAULTS}}
            lo, hi = spans.get(fault, config.down_s)
            heal_at = t + lo + length * (hi - lo)
            active[bookie] = (fault, heal_at, injected, peer)
            # The clock's kind from the same draw as the length (no extra draw, as for a cut).
            clock = CLOCKS[int(length * 1000) % len(CLOCKS)] if fault is Fault.CLOCK else ""
            steps.append(Step(t, fault.value, bookie, injected, peer=peer, clock=clock))
        elif fault in STORE_FAULTS:
            if members:
                continue  # one member at a time: the other two, a majority, serve
            member = int(pick * STORE_MEMBERS)
            lo, hi = config.down_s if fault is Fault.ZK_KILL else config.link_s
            members[member] = (fault, t + lo + length * (hi - lo), injected)
            steps.append(Step(t, fault.value, member, injected))
        elif fault in CONSUMER_FAULTS:
            slot = int(pick * config.consumers)
            if slot in hung:
                continue  # one fault per consumer at a time: a hung one is resumed first
            if fault is Fault.CONSUMER_HANG:
                lo, hi = config.consumer_hang_s
                hung[slot] = (t + lo + length * (hi - lo), injected)
            steps.append(Step(t, fault.value, slot, injected))
        elif fault in COMPACTOR_FAULTS:
            steps.append(Step(t, fault.value, 0, injected))
        else:
            steps.append(Step(t, fault.value, int(pick * config.writers), injected))
        injected += 1
    heal_until(float("inf"))
    # Heals of bookies and of members due in one interval were appended apart: in time order
    # (a stable sort: a fault and a heal at one instant keep their order).
    steps.sort(key=lambda s: s.at_s)
    return steps
