"""One simulated cell shared by the partition scenarios of a module: a three-member
ZooKeeper ensemble, four bookies and client and autorecovery hosts, each on a host of its own
(network namespaces on a bridge, bkframe.testing.faults.hosts). Every scenario heals the network
when it ends, so the next one starts whole."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from bkframe.testing.cluster import HostedCluster
from bkframe.testing.faults.hosts import Host, Network, require_netns
from bkframe.testing.servers import EtcdCluster, ZooKeeperEnsemble
from tests.partitions.harness import Agent

#: Bookies of the cell: short registration TTL and GC off the critical path.
BOOKIE_CONFIG = """
[bookie]
registration_ttl_s = 3.0
"""


@attrs.define
class Cell:
    net: Network
    zk: ZooKeeperEnsemble
    cluster: HostedCluster
    metadata: str
    root: Path
    agents: list[Agent] = attrs.Factory(list)

    def host(self, name: str) -> Host:
        return self.net.hosts[name]

    def agent(self, host: str) -> Agent:
        agent = Agent(self.host(host), self.metadata, self.root / f"agent-{host}-{time.monotonic_ns()}.log")
        self.agents.append(agent)
        return agent

    @property
    def zk_hosts(self) -> list[Host]:
        return [m.host for m in self.zk.members]

    def host_of_bookie(self, bookie_id: str) -> Host:
        return self.cluster.host_of(bookie_id)


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cell]:
    require_netns()
    root = tmp_path_factory.mktemp("cell")
    (root / "bookie.toml").write_text(BOOKIE_CONFIG)
    with Network("partitions") as net:
        zk_hosts = net.add_hosts("zk1", "zk2", "zk3")
        bookie_hosts = net.add_hosts("b1", "b2", "b3", "b4")
        net.add_hosts("c1", "c2", "a1", "a2")
        zk = ZooKeeperEnsemble(root, zk_hosts)
        try:
            zk.start()
            metadata = f"zk://{zk.connect}/cell"
            cluster = HostedCluster(root / "bookies", bookie_hosts, metadata, ("--config", str(root / "bookie.toml")))
            try:
                cluster.start(parallel=True)
                yield Cell(net, zk, cluster, metadata, root)
            finally:
                cluster.close()
        finally:
            zk.stop()


@attrs.define
class EtcdCell:
    net: Network
    etcd: EtcdCluster
    cluster: HostedCluster
    metadata: str


@pytest.fixture(scope="module")
def etcd_cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCell]:
    """A three-member etcd cluster and three bookies on it, each on a host of its own."""
    require_netns()
    root = tmp_path_factory.mktemp("etcd-cell")
    (root / "bookie.toml").write_text(BOOKIE_CONFIG)
    with Network("etcd-partitions") as net:
        etcd_hosts = net.add_hosts("e1", "e2", "e3")
        bookie_hosts = net.add_hosts("b1", "b2", "b3")
        etcd = EtcdCluster(root, etcd_hosts)
        try:
            etcd.start()
            metadata = f"etcd://{etcd.connect}/cell"
            cluster = HostedCluster(root / "bookies", bookie_hosts, metadata, ("--config", str(root / "bookie.toml")))
            try:
                cluster.start(parallel=True)
                yield EtcdCell(net, etcd, cluster, metadata)
            finally:
                cluster.close()
        finally:
            etcd.stop()


@pytest.fixture
def healed(cell: Cell) -> Iterator[Cell]:
    """The cell, healed and with its agents stopped when the test ends (passed or not)."""
    try:
        yield cell
    finally:
        cell.net.heal()
        for agent in cell.agents:
            agent.close()
        cell.agents.clear()
