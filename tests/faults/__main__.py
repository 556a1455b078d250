"""``python -m tests.faults --seed 7 --events 200``: one seeded run outside pytest."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import attrs

from tests.faults.harness import run_faults
from tests.faults.schedule import RunConfig, with_compaction, with_subscriptions


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--events", type=int, default=34)
    parser.add_argument("--workdir", type=Path, default=None, help="kept after the run (default: a new temp dir)")
    parser.add_argument("--quiet-s", type=float, default=None, help="with --events 0: how long the writers run")
    parser.add_argument("--schedule-only", action="store_true", help="print the schedule and exit")
    parser.add_argument(
        "--subscriptions", action="store_true",
        help="add a log producer and consumers of its key_shared subscription, and consumer kills and hangs to the "
             "faults (another schedule than the seed's without it)",
    )
    parser.add_argument(
        "--compaction", action="store_true",
        help="add a compacted log with its writer, a compactor and a table reader, and compactor kills to the faults "
             "(another schedule than the seed's without it; not with partitions: a partition seed runs without them)",
    )
    parser.add_argument(
        "--small-disk", choices=("tmpfs", "ext4"), default="",
        help="the last bookie on a real 16 MiB filesystem, filled by another file for disk_full (needs root)",
    )
    args = parser.parse_args()
    config = RunConfig.for_seed(args.seed, args.events)
    if args.small_disk:
        config = attrs.evolve(config, small_disk=args.small_disk, partitions=False)
    if args.subscriptions:
        config = with_subscriptions(config)
    if args.compaction:
        config = with_compaction(attrs.evolve(config, partitions=False))
    if args.quiet_s is not None:
        config = attrs.evolve(config, cooldown_s=args.quiet_s)
    if args.schedule_only:
        from tests.faults.schedule import make_schedule

        print("\n".join(s.describe() for s in make_schedule(config)))
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"bkframe-faults-{args.seed}-"))
    report = run_faults(config, workdir)
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
