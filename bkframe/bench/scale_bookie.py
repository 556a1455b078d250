"""``bkframe bench scale bookie``: the scale targets of docs/scaling.md for one bookie, measured.

One real bookie process (``bkframe bookie``, no metadata store) is
given ``--ledgers`` ledgers of ``--entries`` small entries each, written over the bookie
protocol with ``--in-flight`` requests outstanding. It reports the file descriptors the
bookie has open (``/proc/PID/fd``), how long a restart after ``kill -9`` takes until the
bookie serves a read, the event loop's longest hold (``bkframe_event_loop_lag_max_seconds``)
through the load and the restart, and reads a sample back byte for byte. Then, with the
bookie stopped, it runs the storage's garbage collection over the same data in this
process (with no metadata store the bookie's own GC does not run) and measures how long
that holds an event loop. ``bench scale metadata`` (:mod:`bkframe.bench.scale_metadata`)
measures the metadata side.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import click
import trio

from bkframe.bookie.runtime.loop_lag import LoopLag
from bkframe.cli import interrupt
from bkframe.cli.options import AT_LEAST_ONE
from bkframe.client.bookies.connection import connect_bookie
from bkframe.core.counters import Counters
from bkframe.launcher import BookieProcess
from bkframe.plugins.entry_log_single import SingleEntryLogManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage
from bkframe.proto.codes import Status

KEY = b"bench-scale"
#: Targets of issue 27, item 1 (docs/scaling.md).
TARGET_FDS = 1000
TARGET_RESTART_S = 30.0
TARGET_LAG_S = 0.050


def entry(ledger_id: int, entry_id: int, size: int) -> bytes:
    head = b"%d:%d:" % (ledger_id, entry_id)
    return (head * (size // len(head) + 1))[:size]


def open_fds(b: BookieProcess) -> int:
    assert b.proc is not None
    return len(os.listdir(f"/proc/{b.proc.pid}/fd"))


def metric(b: BookieProcess, name: str) -> float:
    with urllib.request.urlopen(b.http_url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else float("nan")


async def load(b: BookieProcess, ledgers: int, entries: int, size: int, in_flight: int) -> dict[str, Any]:
    """Every ledger's entries (consecutive: one batch per ledger), ``in_flight`` at a time."""
    statuses: dict[str, int] = {}
    keys = [(lid, e) for lid in range(1, ledgers + 1) for e in range(entries)]
    max_fds = 0
    started = time.monotonic()
    async with connect_bookie(b.host, b.port) as bk:
        for at in range(0, len(keys), in_flight):
            window = keys[at : at + in_flight]
            pending = [bk.submit_add(lid, e, entry(lid, e, size), master_key=KEY, timeout_s=120) for lid, e in window]
            for pend in pending:
                status = (await pend.wait()).status.name
                statuses[status] = statuses.get(status, 0) + 1
            if at // in_flight % 50 == 0:
                max_fds = max(max_fds, open_fds(b))
    return {"seconds": time.monotonic() - started, "statuses": statuses, "max_fds_during_load": max_fds}


async def read_sample(b: BookieProcess, ledgers: int, entries: int, size: int, sample: int) -> dict[str, Any]:
    rng = random.Random(27)
    keys = [(rng.randint(1, ledgers), rng.randrange(entries)) for _ in range(sample)]
    good = 0
    statuses: dict[str, int] = {}
    async with connect_bookie(b.host, b.port) as bk:
        for at in range(0, len(keys), 500):
            batch = keys[at : at + 500]
            pending = [bk.submit_read(lid, e, master_key=KEY, timeout_s=120) for lid, e in batch]
            for (lid, e), pend in zip(batch, pending):
                r = await pend.wait()
                statuses[r.status.name] = statuses.get(r.status.name, 0) + 1
                good += r.status == Status.OK and bytes(r.data) == entry(lid, e, size)
    return {"read": len(keys), "byte_for_byte": good, "statuses": statuses}


async def first_read(b: BookieProcess) -> None:
    async with connect_bookie(b.host, b.port) as bk:
        r = await bk.read(1, 0, master_key=KEY, timeout_s=120)
        if r.status != Status.OK:
            raise click.ClickException(f"the restarted bookie answered {r.status.name} to a read of 1:0")


async def offline_gc(data_dir: Path) -> dict[str, Any]:
    """The storage's GC (live scan of every ledger, compaction) over the bookie's data, with
    the loop lag measured; and the GC's local scan (every ledger's state)."""
    lag = LoopLag(period_s=0.005, idle_period_s=0.005)  # a benchmark: never the idle sampling
    counters = Counters()
    started = time.monotonic()
    logs = SingleEntryLogManager(data_dir / "entrylogs", counters)
    storage = DefaultLedgerStorage(data_dir / "ledgers", logs, counters)
    open_s = time.monotonic() - started
    async with trio.open_nursery() as nursery:
        await nursery.start(lag.run)
        t = time.monotonic()
        states = sum(storage.ledger_state(lid) is not None for lid in storage.ledgers())
        scan_s = time.monotonic() - t
        t = time.monotonic()
        freed = await storage.collect_garbage()
        gc_s = time.monotonic() - t
        await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    await storage.aclose()
    return {
        "storage_open_s": round(open_s, 3),
        "ledger_states_listed": states,
        "local_scan_s": round(scan_s, 3),
        "collect_garbage_s": round(gc_s, 3),
        "bytes_freed": freed,
        "max_loop_lag_s": round(lag.max_since_start, 4),
    }


@click.command(name="bookie")
@click.option("--data-dir", type=click.Path(path_type=Path), required=True, help="The bookie's data dir (emptied first).")
@click.option("--ledgers", type=AT_LEAST_ONE, default=100_000, show_default=True)
@click.option("--entries", type=AT_LEAST_ONE, default=3, show_default=True, help="Entries per ledger.")
@click.option("--entry-size", type=AT_LEAST_ONE, default=100, show_default=True)
@click.option("--in-flight", type=AT_LEAST_ONE, default=2000, show_default=True, help="Adds outstanding at once.")
@click.option("--sample", type=AT_LEAST_ONE, default=10_000, show_default=True, help="Entries read back after the restart.")
@click.option("--json-out", type=click.Path(path_type=Path), default=None, help="Also write the figures here.")
def bench_scale_bookie(
    data_dir: Path, ledgers: int, entries: int, entry_size: int, in_flight: int, sample: int, json_out: Path | None
) -> None:
    """One bookie holding many ledgers: fds, restart time, event-loop lag (docs/scaling.md)."""
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    bookie_dir = data_dir / "bookie"
    b = BookieProcess(bookie_dir, args=("--http-port", "0"))
    result: dict[str, Any] = {"ledgers": ledgers, "entries_per_ledger": entries, "entry_size": entry_size}
    try:
        b.start()
        result["load"] = interrupt.run(load, b, ledgers, entries, entry_size, in_flight)
        result["fds_after_load"] = open_fds(b)
        result["max_loop_lag_through_load_s"] = metric(b, "bkframe_event_loop_lag_max_seconds")
        b.kill()
        started = time.monotonic()
        b.start()
        interrupt.run(first_read, b)
        result["restart_s"] = round(time.monotonic() - started, 2)
        result["sample"] = interrupt.run(read_sample, b, ledgers, entries, entry_size, sample)
        result["fds_after_restart_and_reads"] = open_fds(b)
        result["max_loop_lag_through_restart_and_reads_s"] = metric(b, "bkframe_event_loop_lag_max_seconds")
        b.stop()
    finally:
        if b.running:
            b.kill()
    result["offline_gc"] = interrupt.run(offline_gc, bookie_dir)
    lag = max(
        result["max_loop_lag_through_load_s"],
        result["max_loop_lag_through_restart_and_reads_s"],
        result["offline_gc"]["max_loop_lag_s"],
    )
    fds = max(result["load"]["max_fds_during_load"], result["fds_after_load"], result["fds_after_restart_and_reads"])
    result["verdict"] = {
        f"fds <= {TARGET_FDS}": fds <= TARGET_FDS,
        f"restart <= {TARGET_RESTART_S:g} s": result["restart_s"] <= TARGET_RESTART_S,
        f"loop lag <= {TARGET_LAG_S * 1000:g} ms": lag <= TARGET_LAG_S,
        "no IO_ERROR": "IO_ERROR" not in result["load"]["statuses"] and "IO_ERROR" not in result["sample"]["statuses"],
        "sample read back": result["sample"]["byte_for_byte"] == sample,
    }
    text = json.dumps(result, indent=2)
    click.echo(text)
    if json_out is not None:
        json_out.write_text(text + "\n")
