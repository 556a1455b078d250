"""A partition run's simulated hosts (``RunConfig.partitions``): a host per bookie, per writer
slot and per reader, and one for recoveries, on a bridge (bkframe.testing.hosts). The
harness starts the processes there and plays the network faults of the schedule; the
checks run from the harness's own namespace, which reaches every host."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bkframe.testing.cluster import Cluster, HostedCluster
from bkframe.testing.hosts import Host, Network, require_netns
from tests.faults.schedule import RunConfig, Step

#: The schedule's network actions (faults and heals).
NETWORK_ACTIONS = frozenset({"isolate", "reconnect", "cut", "rejoin"})


class FaultNetwork:
    def __init__(self, config: RunConfig) -> None:
        require_netns()
        self.net = Network(f"faults-seed-{config.seed}")
        try:
            self.bookies = [self.net.add_host(f"b{i}") for i in range(config.bookies)]
            self.writers = [self.net.add_host(f"w{i}") for i in range(config.writers)]
            self.readers = [self.net.add_host(f"r{i}") for i in range(config.readers)]
            self.recoveries = self.net.add_host("rec")
        except BaseException:
            self.net.close()
            raise

    def cluster(self, root: Path, bookie_args: tuple[str, ...]) -> Cluster:
        """The run's bookies, one per bookie host, with the power-loss layer."""
        return HostedCluster(root, self.bookies, f"sqlite://{root / 'metadata.db'}", bookie_args, powerloss=True)

    def host_for(self, role: str, slot: int) -> Host:
        if role == "writer":
            return self.writers[slot]
        if role == "reader":
            return self.readers[slot]
        return self.recoveries

    def command(self, role: str, slot: int, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run on the worker's host."""
        return self.host_for(role, slot).command(cmd)

    def execute(self, step: Step) -> None:
        bookie = self.bookies[step.target]
        if step.action == "isolate":
            self.net.isolate(bookie)
        elif step.action == "reconnect":
            self.net.heal(bookie)
        elif step.action == "cut":
            self.net.cut(self.writers[step.peer], bookie)
        elif step.action == "rejoin":
            self.net.heal(self.writers[step.peer], bookie)
        else:
            raise AssertionError(f"not a network action: {step.action}")

    def heal_all(self) -> None:
        self.net.heal()

    def close(self) -> None:
        self.net.close()
