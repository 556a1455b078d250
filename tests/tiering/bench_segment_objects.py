"""What a segment object costs: a closed segment of 1 KiB records written from its ledger to
Parquet in a filesystem tier, verified, and one row group read back by range (not in the
suite: run it by hand)::

    uv run --all-packages python -m tests.tiering.bench_segment_objects [--entries 50000]

Three bookie processes on sqlite metadata, a log of one segment of ``--entries`` records
(random payloads of ``--entry-size`` bytes, keyed, with event times), then, with the
segment closed: the write (ledger -> Parquet spool -> tier), its verification, and a fresh
reader's first read of one entry in the middle (the tail, then one row group).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import trio

import bkframe
from bkframe import Record
from bkframe.plugins.tier_filesystem import FilesystemTier
from bkframe.testing.cluster import Cluster
from bkframe.tiering.async_tier import AsyncTier
from bkframe.tiering.object_format import ObjectOptions
from bkframe.tiering.segment_reader import SegmentObjectReader
from bkframe.tiering.segment_writer import write_segment_object
from bkframe.tiering.verify import verify_object

PASSWORD = b"bench"


async def bench(uri: str, root: Path, entries: int, entry_size: int, options: ObjectOptions) -> None:
    async with bkframe.open_client(uri) as bk:
        await bk.logs.create("bench", password=PASSWORD, rollover_entries=entries)
        async with await bk.logs.open_writer("bench", password=PASSWORD) as writer:
            for lo in range(0, entries, 5000):
                await writer.append_many(
                    [Record(os.urandom(entry_size), key=b"user-%d" % (i % 1000), timestamp=1_764_000_000_000 + i)
                     for i in range(lo, min(entries, lo + 5000))]
                )
        reader = await bk.logs.reader("bench", password=PASSWORD)
        seg = next(s for s in (await reader.refresh()).segments if s.closed)
        started = time.perf_counter()
        await reader.to_arrow(seg.first(), bkframe.Position(seg.number, seg.last_entry_id + 1))
        hot_s = time.perf_counter() - started

        tier = AsyncTier(FilesystemTier(root / "tier", create=True))
        spool = root / "spool"
        spool.mkdir()
        handle = await bk.open_ledger(seg.ledger_id, password=PASSWORD, recovery=False)
        started = time.perf_counter()
        summary = await write_segment_object(
            handle, tier, log="bench", log_uid=reader.metadata.uid, segment=seg, spool_dir=spool, options=options
        )
        write_s = time.perf_counter() - started
        started = time.perf_counter()
        await verify_object(tier, summary.key, summary.content, size=summary.size, object_crc32c=summary.object_crc32c)
        verify_s = time.perf_counter() - started

    mib = summary.content.entry_bytes / 2**20
    print(f"segment: {summary.entries} entries, {mib:.1f} MiB of entries; object {summary.size / 2**20:.1f} MiB, "
          f"{summary.row_groups} row groups ({options.compression}, {options.row_group_bytes >> 20} MiB target)")
    print(f"hot read (to_arrow from the bookies): {hot_s:.2f} s, {mib / hot_s:.1f} MiB/s, {summary.entries / hot_s:,.0f} rows/s")
    print(f"write ledger -> Parquet -> tier:     {write_s:.2f} s, {mib / write_s:.1f} MiB/s, "
          f"{summary.entries / write_s:,.0f} rows/s")
    print(f"verify (ranged gets, every entry):  {verify_s:.2f} s, {mib / verify_s:.1f} MiB/s")
    for _ in range(3):
        object_reader = SegmentObjectReader(tier.tier, summary.key, size=summary.size)
        started = time.perf_counter()
        middle = summary.entries // 2
        entry = object_reader.entries(middle, middle)
        one_s = time.perf_counter() - started
        group = object_reader.footer().groups_for(middle, middle)[0]
        assert entry[0].position.entry_id == middle
        print(f"one entry by range, fresh reader:   {one_s * 1000:.0f} ms ({object_reader.fetches.requests} gets, "
              f"{object_reader.fetches.bytes / 2**20:.1f} MiB: the tail and row group {group.index} of "
              f"{group.rows} rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--entry-size", type=int, default=1024)
    parser.add_argument("--row-group-mib", type=int, default=32)
    parser.add_argument("--compression", default="zstd")
    args = parser.parse_args()
    options = ObjectOptions(row_group_bytes=args.row_group_mib << 20, compression=args.compression)
    with tempfile.TemporaryDirectory(prefix="bench-segobj-") as tmp:
        root = Path(tmp)
        cluster = Cluster(root / "cluster", 3).start(parallel=True)
        try:
            trio.run(bench, cluster.metadata, root, args.entries, args.entry_size, options)
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
