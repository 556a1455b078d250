"""What a bkframe process costs before it does any work: the CPU of importing the modules a
bookie, a client and the CLI start with, of starting a bookie until it serves, and of an
idle bookie per minute. Each figure is CPU time (user + system), which load on the machine
changes far less than wall time; the import figures are the least of ``--repeat`` runs.

    .venv/bin/python benchmarks/process_costs.py [--idle-s 60] [--repeat 5]

Prints one JSON object (docs/benchmarks/process-costs.md records the runs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bkframe.testing.cluster import Cluster

#: What each kind of process imports first.
IMPORTS = {
    "python": "pass",
    "import bkframe (a client)": "import bkframe",
    "the bookie command": "import bkframe.cli.bookie; from bkframe.core.plugin_manager import PluginManager; PluginManager()",
    "the CLI": "import bkframe.cli.main; from bkframe.core.plugin_manager import PluginManager; PluginManager()",
}


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def import_cpu(code: str, repeat: int) -> float:
    """The least CPU of ``repeat`` fresh interpreters running ``code``."""
    best = float("inf")
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return round(best, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle-s", type=float, default=60.0, help="how long the bookies idle")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each import (the least is kept)")
    args = parser.parse_args()
    result: dict[str, object] = {"imports_cpu_s": {name: import_cpu(code, args.repeat) for name, code in IMPORTS.items()}}
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(Path(root) / "cluster", 3).start()
        try:
            pids = [b.proc.pid for b in cluster.bookies if b.proc is not None]
            result["bookie_start_cpu_s"] = [round(process_cpu(p), 2) for p in pids]
            time.sleep(5)  # past the start's last steps
            before = [process_cpu(p) for p in pids]
            time.sleep(args.idle_s)
            per_minute = [(process_cpu(p) - b) * 60 / args.idle_s for p, b in zip(pids, before, strict=True)]
            result["idle_bookie_cpu_s_per_minute"] = [round(x, 3) for x in per_minute]
        finally:
            cluster.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
