"""A Spark standalone cluster on simulated hosts: a master and workers, each on a host of its
own, started with the ``bin/spark-class`` the ``pyspark`` package ships."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

from bkframe.testing.faults.hosts import Host
from bkframe.testing.servers import TEST_JVM_OPTIONS, stop_process

SPARK_HOME = Path(pyspark.__file__).parent
MASTER_PORT, MASTER_UI_PORT, WORKER_UI_PORT = 7077, 8080, 8081
START_TIMEOUT_S = 120.0


def jvm_env_for_tests() -> dict[str, str]:
    """The environment of a test's Spark processes: every JVM they start (master, workers,
    executors, a driver) takes the quick compiler and serial collector (JDK_JAVA_OPTIONS):
    they live a minute and share two cores with the rest of the suite."""
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "JDK_JAVA_OPTIONS": " ".join(TEST_JVM_OPTIONS[1:])}


class SparkStandalone:
    """``SparkStandalone(root, master_host, worker_hosts).start()``; ``.master_url``."""

    def __init__(self, root: Path, master: Host, workers: list[Host], *, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        self.master = master
        self.workers = workers
        self.cores, self.memory = cores, memory
        self.procs: list[subprocess.Popen[bytes]] = []
        root.mkdir(parents=True, exist_ok=True)

    @property
    def master_url(self) -> str:
        return f"spark://{self.master.address}:{MASTER_PORT}"

    def work_dir(self, worker: Host) -> Path:
        return self.root / f"work-{worker.name}"

    def _spawn(self, host: Host, name: str, args: list[str]) -> None:
        env = {**jvm_env_for_tests(), "SPARK_LOCAL_IP": host.address, "SPARK_LOG_DIR": str(self.root), "SPARK_NO_DAEMONIZE": "1"}
        log = open(self.root / f"{name}.log", "ab")
        self.procs.append(
            host.popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=env, stdout=log, stderr=subprocess.STDOUT)
        )

    def state(self) -> dict[str, Any]:
        """The master's view (its web UI's JSON), {} if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{self.master.address}:{MASTER_UI_PORT}/json/", timeout=2) as r:
                return dict(json.loads(r.read()))
        except (OSError, ValueError):
            return {}

    def start(self) -> SparkStandalone:
        self._spawn(self.master, "master", [
            "org.apache.spark.deploy.master.Master", "--host", self.master.address, "--port", str(MASTER_PORT),
            "--webui-port", str(MASTER_UI_PORT),
        ])
        for w in self.workers:
            self.work_dir(w).mkdir(parents=True, exist_ok=True)
            self._spawn(w, f"worker-{w.name}", [
                "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", w.address,
                "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(WORKER_UI_PORT),
                "--work-dir", str(self.work_dir(w)),
            ])
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            alive = [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]
            if len(alive) == len(self.workers):
                return self
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        raise RuntimeError(f"the Spark standalone cluster did not start with {len(self.workers)} workers; logs in {self.root}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop_process(p)
