"""``bkframe bench autorecovery``: how fast autorecovery re-replicates a lost bookie's
closed ledgers (docs/benchmarks/autorecovery.md), with or without a writer appending meanwhile.

Starts five bookie processes (``bkframe bookie``, sqlite metadata, autorecovery enabled in
each), writes ``--size-mb`` of closed ledgers (E=3 W=3 A=2), kills the bookie in most of
them and deletes its data, then times from the first under-replicated mark to the moment
no ledger names the lost bookie. MB/s counts the payload copied (each lost replica once).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import click
import trio

import bkframe
from bkframe.cli import interrupt
from bkframe.cli.options import AT_LEAST_ONE
from bkframe.launcher import Cluster

CONFIG = """[bookie]
registration_ttl_s = 2.0

[autorecovery]
enabled = true
lost_bookie_grace_s = 0.0
check_interval_s = 0.2
"""


@click.command(name="autorecovery")
@click.option("--data-dir", type=click.Path(path_type=Path), required=True, help="Where the bookies live (emptied first).")
@click.option("--size-mb", type=AT_LEAST_ONE, default=1024, show_default=True, help="Payload written in closed ledgers.")
@click.option("--ledgers", type=AT_LEAST_ONE, default=16, show_default=True)
@click.option("--entry-size", type=AT_LEAST_ONE, default=65536, show_default=True)
@click.option("--foreground-writes", is_flag=True, help="A writer appends (window 64) while the copies run.")
@click.option("--json", "as_json", is_flag=True)
def autorecovery(
    data_dir: Path, size_mb: int, ledgers: int, entry_size: int, foreground_writes: bool, as_json: bool
) -> None:
    """Time the re-replication of a lost bookie's closed ledgers."""
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    (data_dir / "bookie.toml").write_text(CONFIG)
    cluster = Cluster(data_dir, 5, bookie_args=("--config", str(data_dir / "bookie.toml")))
    cluster.start(parallel=True)
    try:
        result = interrupt.run(_run, cluster, size_mb, ledgers, entry_size, foreground_writes)
    finally:
        cluster.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
    else:
        for k, v in result.items():
            click.echo(f"{k}: {v}")


async def _run(cluster: Cluster, size_mb: int, ledgers: int, entry_size: int, foreground: bool) -> dict[str, Any]:
    payload = b"x" * entry_size
    per_ledger = max(1, size_mb * 1024 * 1024 // entry_size // ledgers)
    async with bkframe.open_client(cluster.metadata) as client:
        ids = []
        t = time.monotonic()
        for _ in range(ledgers):
            w = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
            for start in range(0, per_ledger, 256):
                await w.append_many([payload] * min(256, per_ledger - start))
            await w.close()
            ids.append(w.ledger_id)
        write_s = time.monotonic() - t
        mds = [await client.ledger_metadata(i) for i in ids]
        victim = max((b.bookie_id for b in cluster.bookies), key=lambda b: sum(b in md.bookies() for md in mds))
        copied = sum(md.length for md in mds if victim in md.bookies())
        appended = [0]

        async def write_meanwhile() -> None:
            w = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
            while True:
                await w.append_many([payload] * 64)
                appended[0] += 64

        async with trio.open_nursery() as nursery:
            if foreground:
                nursery.start_soon(write_meanwhile)
            proc = cluster.by_id(victim)
            proc.kill()
            shutil.rmtree(proc.data_dir)
            killed = time.time()
            first_mark = 0.0
            while True:
                # Counted, not listed, ten times a second: a page tells when the first was made.
                marked = await client.metadata.count_under_replicated()
                if marked and not first_mark:
                    first_mark = min((m.since for m in await client.metadata.list_under_replicated(limit=1000)), default=0.0)
                left = [md for md in [await client.ledger_metadata(i) for i in ids] if victim in md.bookies()]
                if first_mark and not left and not marked:
                    break
                await trio.sleep(0.1)
            done = time.time()
            nursery.cancel_scope.cancel()
    copy_s = done - first_mark
    return {
        "payload_mb": round(per_ledger * ledgers * entry_size / 1e6, 1),
        "write_s": round(write_s, 1),
        "ledgers_on_lost_bookie": sum(victim in md.bookies() for md in mds),
        "copied_mb": round(copied / 1e6, 1),
        "detect_s": round(first_mark - killed, 1),
        "copy_s": round(copy_s, 1),
        "copy_mb_per_s": round(copied / 1e6 / copy_s, 1),
        "foreground_mb_per_s": round(appended[0] * entry_size / 1e6 / copy_s, 1) if foreground else None,
    }
