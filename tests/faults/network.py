"""A partition run's simulated hosts (``RunConfig.partitions``): a host per bookie, per writer
slot and per reader, one for recoveries (and in the soak one per log writer, log consumer and
autorecovery service) and three for a ZooKeeper ensemble (the run's
metadata store), on a bridge (bkframe.testing.faults.hosts). Each bookie sits behind a link proxy
on its host (``HostedCluster(proxied=True)``). The harness starts the processes there and
plays the schedule's network faults: partitions of hosts, link faults on the proxies, and
faults of the ensemble's members. The checks run from the harness's own namespace, which
reaches every host."""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Sequence
from pathlib import Path

from bkframe.testing.cluster import Cluster, HostedCluster
from bkframe.testing.faults.hosts import Host, Network, require_netns
from bkframe.testing.faults.link_proxy import ALL_PEERS, LinkFaults
from bkframe.testing.servers import ZooKeeperEnsemble
from tests.faults.schedule import HEAL, LINK_FAULTS, STORE_FAULTS, STORE_MEMBERS, Fault, RunConfig, Step

LINK_ACTIONS = frozenset(f.value for f in LINK_FAULTS) | {HEAL[f] for f in LINK_FAULTS}
STORE_ACTIONS = frozenset(f.value for f in STORE_FAULTS) | {HEAL[f] for f in STORE_FAULTS}
#: The schedule's network actions (faults and heals).
NETWORK_ACTIONS = frozenset({"isolate", "reconnect", "cut", "rejoin"}) | LINK_ACTIONS | STORE_ACTIONS
#: How long the ensemble may take to serve with every member again before a member fault
#: (a restarted JVM, a rejoined member catching up) and after the schedule.
ENSEMBLE_BACK_S = 90.0


class FaultNetworkError(RuntimeError):
    """A network fault could not be injected or healed as the schedule's rules need."""


def link_faults(config: RunConfig, step: Step) -> LinkFaults:
    """What a link fault step does: its numbers drawn from (seed, fault id) alone, so the
    schedule (a function of the seed) fixes them without a draw of its own."""
    rng = random.Random(f"{config.seed}/link/{step.fault_id}")
    fault = Fault(step.action)
    if fault is Fault.SLOW_LINK:
        latency = rng.uniform(0.01, 0.3)  # one way; the top doubles a round trip to 0.6 s, jitter to 1.2
        return LinkFaults(latency_s=latency, jitter_s=rng.uniform(0.0, latency))
    if fault is Fault.NARROW_LINK:
        return LinkFaults(bandwidth_bps=2 ** rng.uniform(16, 21))  # 64 KiB/s .. 2 MiB/s
    return LinkFaults(
        blackhole=fault is Fault.BLACKHOLE, tear=fault is Fault.TORN_FRAME, reset=fault is Fault.LINK_RESET
    )


class FaultNetwork:
    def __init__(self, config: RunConfig) -> None:
        require_netns()
        self.config = config
        self.net = Network(f"faults-seed-{config.seed}")
        try:
            self.bookies = [self.net.add_host(f"b{i}") for i in range(config.bookies)]
            self.writers = [self.net.add_host(f"w{i}") for i in range(config.writers)]
            self.readers = [self.net.add_host(f"r{i}") for i in range(config.readers)]
            self.recoveries = self.net.add_host("rec")
            # The soak's log writers, log consumers and autorecovery services (none in the suite's runs).
            self.extra: dict[str, list[Host]] = {
                role: [self.net.add_host(f"{prefix}{i}") for i in range(count)]
                for role, prefix, count in (
                    ("logwriter", "lw", config.log_writers), ("logconsumer", "lc", config.log_consumers),
                    ("autorecovery", "ar", config.autorecovery),
                )
            }
            self.zk_hosts = [self.net.add_host(f"zk{i}") for i in range(STORE_MEMBERS)]
        except BaseException:
            self.net.close()
            raise
        self.zk: ZooKeeperEnsemble | None = None
        self.hosted: HostedCluster | None = None
        #: Fault id of a member fault in force -> (its action, the member's index).
        self.store_faults: dict[int, tuple[str, int]] = {}
        #: What each network step did (the link faults' numbers, the member a fault hit).
        self.log_path: Path | None = None
        #: The proxies' counters summed (read at the heal), and seconds spent waiting for the
        #: ensemble to serve whole again before a member fault.
        self.proxy_totals: collections.Counter[str] = collections.Counter()
        self.ensemble_waits_s = 0.0

    def cluster(self, root: Path, bookie_args: tuple[str, ...]) -> Cluster:
        """The run's ZooKeeper ensemble (started here) and bookies, one per bookie host behind
        its link proxy (started here), with the power-loss layer."""
        root.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "network.txt"
        try:
            self.zk = ZooKeeperEnsemble(root / "zk", self.zk_hosts)
            for member in self.zk.members:
                member.start()  # the JVMs start while the proxies do
            metadata = f"zk://{self.zk.connect}/faults"
            self.hosted = HostedCluster(root, self.bookies, metadata, bookie_args, proxied=True, powerloss=True)
            self.hosted.start_proxies(seed=self.config.seed)
            self.zk.wait_serving(STORE_MEMBERS)
        except BaseException:
            if self.hosted is not None:
                self.hosted.close()
            self.close()
            raise
        return self.hosted

    def host_for(self, role: str, slot: int) -> Host:
        if role == "writer":
            return self.writers[slot]
        if role == "reader":
            return self.readers[slot]
        if role in self.extra:
            return self.extra[role][slot]
        return self.recoveries

    @property
    def client_hosts(self) -> list[Host]:
        """Every host that runs a ZooKeeper client: bookies and workers."""
        return [*self.bookies, *self.writers, *self.readers, self.recoveries, *(h for hs in self.extra.values() for h in hs)]

    def command(self, role: str, slot: int, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run on the worker's host."""
        return self.host_for(role, slot).command(cmd)

    def note(self, step: Step, what: str) -> None:
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(f"{step.describe()}: {what}\n")

    def execute(self, step: Step) -> None:
        """Play one network step; FaultNetworkError if it cannot be played (a proxy that does
        not answer, a command that fails, an ensemble without a leader)."""
        try:
            if step.action in LINK_ACTIONS:
                self.execute_link(step)
            elif step.action in STORE_ACTIONS:
                self.execute_store(step)
            else:
                self.execute_partition(step)
        except FaultNetworkError:
            raise
        except RuntimeError as e:  # NetworkError, LinkProxyError, no ZooKeeper leader
            raise FaultNetworkError(str(e)) from e

    def execute_partition(self, step: Step) -> None:
        bookie = self.bookies[step.target]
        if step.action == "isolate":
            self.net.isolate(bookie)
        elif step.action == "reconnect":
            self.net.heal(bookie)
            # That healed every cut of the bookie's host: a member cut from the clients stays cut from it.
            for action, member in self.store_faults.values():
                if action == Fault.ZK_CUT_CLIENTS.value:
                    self.net.cut(self.zk_hosts[member], bookie)
        elif step.action == "cut":
            self.net.cut(self.writers[step.peer], bookie)
        elif step.action == "rejoin":
            self.net.heal(self.writers[step.peer], bookie)
        else:
            raise AssertionError(f"not a network action: {step.action}")

    def execute_link(self, step: Step) -> None:
        assert self.hosted is not None
        proxy = self.hosted.proxies[step.target]
        peer = ALL_PEERS if step.peer < 0 else self.writers[step.peer].address
        if step.action in HEAL.values():
            proxy.clear(peer)
            return
        faults = link_faults(self.config, step)
        proxy.set_faults(faults, peer)
        self.note(step, f"{faults} on the link from {peer}")

    def execute_store(self, step: Step) -> None:
        assert self.zk is not None
        if step.action in HEAL.values():
            action, member = self.store_faults.pop(step.fault_id, ("", -1))
            if action == Fault.ZK_KILL.value:
                self.zk.members[member].start()
            elif action == Fault.ZK_CUT_LEADER.value:
                for other in self.zk_hosts:
                    if other is not self.zk_hosts[member]:
                        self.net.heal(self.zk_hosts[member], other)
            elif action == Fault.ZK_CUT_CLIENTS.value:
                for host in self.client_hosts:
                    self.net.heal(self.zk_hosts[member], host)
            return  # else: the fault was not injected
        # The rule that keeps a majority serving: the last member fault is over, every member serves.
        self.wait_ensemble(f"before fault #{step.fault_id} ({step.action})")
        member = step.target
        if step.action == Fault.ZK_KILL.value:
            proc = self.zk.members[member].proc
            assert proc is not None
            proc.kill()
            proc.wait(timeout=30)
        elif step.action == Fault.ZK_CUT_LEADER.value:
            member = self.zk.members.index(self.zk.leader())
            for other in self.zk_hosts:
                if other is not self.zk_hosts[member]:
                    self.net.cut(self.zk_hosts[member], other)
        else:
            for host in self.client_hosts:
                self.net.cut(self.zk_hosts[member], host)
        self.store_faults[step.fault_id] = (step.action, member)
        self.note(step, f"member zk{member} ({self.zk.members[member].address})")

    def wait_ensemble(self, when: str) -> None:
        """Every member serves, one of them the leader; FaultNetworkError if not in ENSEMBLE_BACK_S."""
        assert self.zk is not None
        started = time.monotonic()
        try:
            self.zk.wait_serving(STORE_MEMBERS, timeout_s=ENSEMBLE_BACK_S)
        except RuntimeError as e:
            modes = {f"zk{i}": m.mode() or "not serving" for i, m in enumerate(self.zk.members)}
            raise FaultNetworkError(f"{when}: {e} (modes {modes})") from None
        waited = time.monotonic() - started
        self.ensemble_waits_s += waited
        if waited > 1.0 and self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(f"{when}: waited {waited:.1f} s for every ZooKeeper member to serve\n")

    def heal_all(self) -> None:
        """Every link clean, every host reachable, every member running and serving."""
        self.net.heal()
        if self.hosted is not None:
            for bookie, proxy in zip(self.hosted.bookies, self.hosted.proxies):
                if proxy.proc is None or proxy.proc.poll() is not None:
                    tail = proxy.log_path.read_text(errors="replace")[-1500:] if proxy.log_path.exists() else ""
                    raise FaultNetworkError(f"{bookie.bookie_id}'s link proxy is gone ({proxy.log_path}): {tail}")
                proxy.clear()
                stats = proxy.stats()
                self.proxy_totals.update(stats)
                if self.log_path is not None:
                    with open(self.log_path, "a") as f:
                        f.write(f"{bookie.bookie_id}'s link proxy: {stats}\n")
        if self.zk is not None:
            for member in self.zk.members:
                if member.proc is None or member.proc.poll() is not None:
                    member.start()
            self.store_faults.clear()
            self.wait_ensemble("after the schedule")

    def summary(self) -> str:
        """One line for the run's summary: what the link faults did to the traffic."""
        t = self.proxy_totals
        return (
            f"link proxies: {t['bytes_up'] / 1e6:.1f} MB to bookies, {t['bytes_down'] / 1e6:.1f} MB back, "
            f"{t['connections']} connections ({t['refused']} to a bookie that was down), {t['resets']} reset, "
            f"{t['tears']} torn, {t['swallowed'] / 1e3:.1f} kB swallowed; ZooKeeper: {self.ensemble_waits_s:.1f} s "
            "waited for all three members to serve before member faults"
        )

    def close(self) -> None:
        self.net.close()
