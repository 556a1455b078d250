"""Wall time (and CPU) of short ``bkframe`` commands, in fresh processes, of this tree and of
another checkout, alternating run by run so that load on the machine weighs on both alike.

    .venv/bin/python benchmarks/cli_costs.py [--runs 10] [--before DIR]

``--before DIR``: a checkout's root (e.g. ``git archive REV bkframe | tar -x -C DIR``); its
``bkframe`` package runs on this venv's interpreter and libraries, through ``PYTHONPATH``. The
commands run the console script from a scratch directory, with bytecode caching on (as a
``pip install`` has it: ``PYTHONDONTWRITEBYTECODE`` set would compile every module at each
start), after one warm-up run each. The metadata-only command reads a sqlite store of a
cluster made for it. Prints a Markdown table of medians (docs/benchmarks/process-costs.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter

BKFRAME = Path(sys.executable).parent / "bkframe"


def commands(uri: str) -> dict[str, list[str]]:
    return {
        "bkframe --version": ["--version"],
        "bkframe --help": ["--help"],
        "bkframe log list --metadata sqlite:///...": ["log", "list", "--metadata", uri],
        "bkframe cluster info --metadata sqlite:///...": ["cluster", "info", "--metadata", uri],
        "bkframe bookies list --metadata sqlite:///...": ["bookies", "list", "--metadata", uri],
    }


def run(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``bkframe ARGV``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = perf_counter()
    subprocess.run([str(BKFRAME), *argv], env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    wall = perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command and tree (the median is kept)")
    parser.add_argument("--before", type=Path, help="another checkout's root, to compare with")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "BKFRAME_METADATA")}
    trees = {"after": env}
    if args.before is not None:
        trees = {"before": {**env, "PYTHONPATH": str(args.before.resolve())}, "after": env}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        uri = f"sqlite:///{scratch}/meta.db"
        subprocess.run([str(BKFRAME), "cluster", "init", "--metadata", uri], env=env, check=True, stdout=subprocess.DEVNULL)
        table = commands(uri)
        times: dict[tuple[str, str], list[tuple[float, float]]] = {(c, t): [] for c in table for t in trees}
        for argv in table.values():
            for tree_env in trees.values():
                run(argv, tree_env, scratch)  # warm-up: bytecode written, files in the page cache
        for _ in range(args.runs):
            for name, argv in table.items():
                for tree, tree_env in trees.items():
                    times[name, tree].append(run(argv, tree_env, scratch))
    print("| command | " + " | ".join(f"{t}: wall / CPU (ms)" for t in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for name in table:
        cells = []
        for tree in trees:
            walls, cpus = zip(*times[name, tree], strict=True)
            cells.append(f"{statistics.median(walls) * 1000:.0f} / {statistics.median(cpus) * 1000:.0f}")
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    print(f"\n{os.cpu_count()} cores; load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
