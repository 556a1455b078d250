"""The pipeline of ``examples/spark_pipeline.py`` on a real Spark standalone cluster: a master
and two workers, each on a simulated host of its own, the driver on a third, three bookies
and ZooKeeper on hosts of their own (issue 25). Executors reach the bookies only through
the bridge, at their advertised addresses (the bookies bind 0.0.0.0 on their hosts)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bkframe.testing.cluster import HostedCluster
from bkframe.testing.faults.hosts import Network, require_netns
from bkframe.testing.servers import ZooKeeperEnsemble

from .standalone import SparkStandalone, jvm_env_for_tests

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.subprocess
@pytest.mark.timeout(600)  # a master, two workers and the driver's JVMs: ~80 s alone, 175 s loaded to 20
def test_the_pipeline_runs_on_a_standalone_cluster_with_executors_on_other_hosts(tmp_path: Path) -> None:
    require_netns()
    with Network("spark") as net:
        zk_host, master, w1, w2, driver = net.add_hosts("zk", "master", "w1", "w2", "driver")
        bookie_hosts = net.add_hosts("b1", "b2", "b3")
        zk = ZooKeeperEnsemble(tmp_path / "zk", [zk_host]).start()
        spark = SparkStandalone(tmp_path / "spark", master, [w1, w2])
        try:
            metadata = f"zk://{zk.connect}/pipeline"
            bookies = HostedCluster(tmp_path / "bookies", bookie_hosts, metadata).start(parallel=True)
            try:
                spark.start()
                run = driver.run(
                    [sys.executable, str(REPO / "examples" / "spark_pipeline.py"), "--metadata", metadata,
                     "--rows", "999", "--master", spark.master_url, "--driver-host", driver.address, "--no-warm-up"],
                    cwd=tmp_path, capture_output=True, text=True, timeout=600, env=jvm_env_for_tests(),
                )
                assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
                assert "verified; rows/s: bulk load" in run.stdout, run.stdout
                # Executors ran on both workers' hosts, not in the driver.
                apps = spark.state().get("completedapps", [])
                assert [a["name"] for a in apps] == ["bkframe-example"], apps
                for worker in (w1, w2):
                    logs = list(spark.work_dir(worker).glob("app-*/*/stderr"))
                    assert logs, f"no executor ran on {worker}"
            finally:
                bookies.close()
        finally:
            spark.stop()
            zk.stop()

