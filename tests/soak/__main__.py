"""``python -m tests.soak --minutes 20 --seed 1``: 30 bookies on 30 simulated hosts, a
3-member ZooKeeper ensemble, ledger writers and readers, log writers and consumers, and
autorecovery, under a seeded nemesis for that long; then heal, check, and print the table
docs/reliability.md records. Needs root (network namespaces), ZooKeeper and a JRE."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from tests.faults.schedule import make_schedule
from tests.soak.run import SoakRun, soak_config, soak_table


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=20.0, help="of faults (start, heal and checks come on top)")
    parser.add_argument("--bookies", type=int, default=30)
    parser.add_argument("--workdir", type=Path, default=None, help="kept after the run (default: a new temp dir)")
    parser.add_argument("--schedule-only", action="store_true", help="print the schedule and exit")
    args = parser.parse_args()
    if args.bookies < 4 or args.minutes <= 0:
        parser.error("--bookies must be at least 4 and --minutes above 0")
    config = soak_config(args.seed, args.minutes, bookies=args.bookies)
    if args.schedule_only:
        print("\n".join(s.describe() for s in make_schedule(config)))
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"bkframe-soak-{args.seed}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # The sampler's metadata client logs every ZooKeeper fault it rides through: to a file, not the table.
    logging.basicConfig(filename=workdir / "harness.log", level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    run = SoakRun(config, workdir)
    run.report.reproduce = f"uv run --all-packages python -m tests.soak --seed {args.seed} --minutes {args.minutes:g} " \
                           f"--bookies {args.bookies}"
    report = run.run()
    print(report.summary())
    print(f"\nsoak started {started}, {config.events} faults scheduled over {args.minutes:g} min:")
    for key, value in soak_table(run, report).items():
        print(f"| {key} | {value} |")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
