"""What ``bkframe sandbox --demo`` does on its cluster: ledgers, a named log (offloaded in part
to a directory tier), a Spark pipeline.

Each part writes, reads back, verifies and prints figures; a mismatch is an error. The Spark
pipeline (:mod:`bkframe_spark.pipeline`, the ``bkframe-spark`` distribution) runs in a child
process of this interpreter: its JVM and Spark's Python workers live and die with that
process, and the sandbox keeps no Spark state.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import trio

from bkframe.client.client import Client, open_client
from bkframe.client.logs.model import LogEntry, Position
from bkframe.client.logs.writer import LogWriter
from bkframe.errors import LogFencedError, NoSuchLogError

Out = Callable[[str], None]

#: The named log of the demo, and its consumer's cursor.
DEMO_LOG = "demo"
DEMO_CURSOR = "demo-reader"
#: Events the Spark pipeline generates (about a minute of Spark time on 2 cores).
SPARK_ROWS = 20_000
#: The Spark pipeline's logs: names of the demo's own, so that the README's and docs/spark.md's
#: first steps (``log create events``, appends printing ``0:0``, counts over ``events``) find
#: their names free after a demo ran.
SPARK_EVENTS_LOG = "demo-events"
SPARK_COUNTS_LOG = "demo-counts"
#: How long the log demo's reading may take before it is an error rather than a hang.
LOG_READ_TIMEOUT_S = 120.0
#: ... and the Spark pipeline (about a minute on 2 busy cores; Spark's start-up included).
SPARK_TIMEOUT_S = 900.0


async def demo_ledgers(client: Client, bookies: int, out: Out) -> dict[str, Any]:
    """Write a ledger of each built-in write-path type, read it back, verify, report."""
    e = min(3, bookies)
    a = max(1, min(2, e))
    count, size = 20_000, 1024
    payloads = [(b"%08d" % i) + os.urandom(size - 8) for i in range(count)]
    report: dict[str, Any] = {}
    for ledger_type in ("PD_JOURNAL", "BYPASS_JOURNAL"):
        writer = await client.create_ledger(
            ensemble=e, write_quorum=e, ack_quorum=a, ledger_type=ledger_type, password=b"demo"
        )
        out(f"created ledger {writer.ledger_id}: E={e} W={e} A={a} {ledger_type} on "
            f"{', '.join(writer.metadata.fragments[0][1])}")
        start = time.perf_counter()
        for first in range(0, count, 512):  # 512 appends in flight, sent as batches
            pending = [writer.append_async(payload) for payload in payloads[first : first + 512]]
            for pa in pending:
                await pa.wait()
        write_s = time.perf_counter() - start
        md = await writer.close()
        out(f"  wrote {count} entries of {size} B, 512 in flight, in {write_s:.2f} s; closed at entry {md.last_entry_id}")
        reader = await client.open_ledger(writer.ledger_id, password=b"demo")
        start = time.perf_counter()
        got = []
        for first in range(0, count, 1000):
            got.extend(await reader.read(first, min(first + 999, reader.lac)))
        read_s = time.perf_counter() - start
        ok = [entry.payload for entry in got] == payloads
        out(f"  read {len(got)} entries back in {read_s:.2f} s; {'all match' if ok else 'MISMATCH'}")
        if not ok:
            raise click.ClickException(f"demo read back different entries than it wrote to {ledger_type} ledger")
        report[ledger_type] = {"ledger_id": writer.ledger_id, "entries": count, "write_s": write_s, "read_s": read_s}
    return report


async def _append_all(writer: LogWriter, payloads: list[bytes], acked: dict[Position, bytes]) -> None:
    for first in range(0, len(payloads), 512):
        batch = payloads[first : first + 512]
        pending = [writer.append_async(p) for p in batch]
        for p, payload in zip(pending, batch):
            acked[await p.wait()] = payload


async def demo_log(metadata: str, bookies: int, out: Out) -> dict[str, Any]:
    """A named log: two writers in turn (the second fences the first) across rollovers, a
    consumer tailing it live with a durable cursor, then a batch read; all verified.

    Long on purpose: the demo reads as the story it prints, one step after the other.
    """
    count, size, rollover = 20_000, 1024, 5_000
    e = min(3, bookies)
    q = min(2, e)
    payloads = [(b"%08d" % i) + os.urandom(size - 8) for i in range(count)]
    half = count // 2
    acked: dict[Position, bytes] = {}
    tailed: list[LogEntry] = []
    # Two clients, as two processes would be: the second writer takes the log from the first.
    async with open_client(metadata) as c1, open_client(metadata) as c2:
        logs = c1.logs
        try:
            await logs.delete(DEMO_LOG)
            out(f"deleted log {DEMO_LOG!r} of an earlier demo")
        except NoSuchLogError:
            pass
        await logs.create(DEMO_LOG, ensemble=e, write_quorum=q, ack_quorum=q, rollover_entries=rollover)
        await logs.create_cursor(DEMO_LOG, DEMO_CURSOR, "earliest")
        out(f"created log {DEMO_LOG!r}: segments E={e} W={q} A={q}, rolled over every {rollover} entries; "
            f"cursor {DEMO_CURSOR!r}")

        async def consume() -> None:
            # A consumer follows the log as it is written, from its cursor, acking as it goes.
            start = (await logs.cursor(DEMO_LOG, DEMO_CURSOR)).position
            async for chunk in (await logs.reader(DEMO_LOG)).tail_chunks(start):
                tailed.extend(chunk)
                await logs.ack(DEMO_LOG, DEMO_CURSOR, chunk[-1].position)
                if len(tailed) >= count:
                    return

        start = time.perf_counter()
        with trio.fail_after(LOG_READ_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                first = await logs.open_writer(DEMO_LOG)
                await _append_all(first, payloads[:half], acked)
                second = await c2.logs.open_writer(DEMO_LOG)
                try:
                    await first.append(b"too late")
                except LogFencedError:
                    fenced = True
                else:
                    fenced = False
                await _append_all(second, payloads[half:], acked)
                await second.close()
        write_s = time.perf_counter() - start
        if not fenced:
            raise click.ClickException(f"log {DEMO_LOG!r}: the first writer could still append after the second opened")
        info = await logs.info(DEMO_LOG)
        segments = [f"{s.number}:{info.entries.get(s.number, 0)}" for s in info.segments]
        out(f"  wrote {count} entries of {size} B, {half} by a first writer, then {count - half} by a second that "
            f"fenced it (its next append: LogFencedError), in {write_s:.2f} s")
        out(f"  segments (number:entries): {' '.join(segments)}; end {info.end}")
        tail_ok = [(t.position, t.payload) for t in tailed] == sorted(acked.items())
        lag = {c.cursor.name: c.lag for c in info.cursors}.get(DEMO_CURSOR)
        out(f"  a consumer tailed {len(tailed)} entries live as they were written, acking its cursor "
            f"{DEMO_CURSOR!r} (lag now {lag}); {'all match' if tail_ok else 'MISMATCH'}")

        start = time.perf_counter()
        with trio.fail_after(LOG_READ_TIMEOUT_S):
            got = await (await logs.reader(DEMO_LOG)).read("earliest")
        read_s = time.perf_counter() - start
        read_ok = [(g.position, g.payload) for g in got] == sorted(acked.items()) and [g.payload for g in got] == payloads
        out(f"  read {len(got)} entries back from 'earliest' in {read_s:.2f} s; "
            f"{'all match, in order' if read_ok else 'MISMATCH'}")
        if not (tail_ok and read_ok and lag == 0 and len(acked) == count):
            raise click.ClickException(f"demo read back different entries than it wrote to log {DEMO_LOG!r}")
    return {"log": DEMO_LOG, "entries": count, "segments": len(info.segments), "write_s": write_s,
            "read_s": read_s}


async def demo_tier(metadata: str, tier_dir: Path, out: Out) -> dict[str, Any]:
    """Tiered storage: the demo log's closed segments offloaded to a directory as Parquet
    objects (docs/tiered-storage.md), then the whole log read back across both tiers and
    compared with what the bookies gave before."""
    if importlib.util.find_spec("pyarrow") is None:
        out("tiered storage: left out: pyarrow is not installed (install bkframe[arrow])")
        return {}
    tier_dir.mkdir(parents=True, exist_ok=True)
    tier = tier_dir.resolve().as_uri()
    async with open_client(metadata) as client:
        logs = client.logs
        with trio.fail_after(LOG_READ_TIMEOUT_S):
            before = await (await logs.reader(DEMO_LOG)).read("earliest")
        start = time.perf_counter()
        with trio.fail_after(LOG_READ_TIMEOUT_S):
            result = await logs.offload(DEMO_LOG, tier=tier)
        offload_s = time.perf_counter() - start
        offloaded = {seg.number for seg in result.offloaded}
        entries = sum(seg.entries for seg in result.offloaded)
        out(f"tiered storage: offloaded {len(offloaded)} closed segment(s) of log {DEMO_LOG!r} ({entries} entries) to "
            f"{tier} as {result.object_bytes:,} bytes of Parquet in {offload_s:.2f} s, each object checked entry by entry "
            f"before the log's metadata named it; the ledgers stay on the bookies for the log's deletion lag")
        reader = await logs.reader(DEMO_LOG)
        start = time.perf_counter()
        with trio.fail_after(LOG_READ_TIMEOUT_S):
            after = await reader.read("earliest")
        read_s = time.perf_counter() - start
        from_tier = sum(1 for entry in after if entry.position.segment in offloaded)
        reads = reader.tier_reads
        ok = after == before and from_tier == entries and reads.object_reads > 0 and reads.fallbacks == 0
        rest = len(after) - from_tier
        from_bookies = f"{rest} from the bookies" if rest else "none from the bookies"
        out(f"  read {len(after)} entries back from 'earliest' in {read_s:.2f} s: {from_tier} from the objects "
            f"({reads.object_reads} ranged reads), {from_bookies}; "
            f"{'all match what the bookies gave before' if ok else 'MISMATCH'}")
        if not ok:
            raise click.ClickException(f"demo read log {DEMO_LOG!r} back across the tiers differently than before")
    return {"tier": tier, "segments": len(offloaded), "entries": entries, "object_bytes": result.object_bytes,
            "offload_s": offload_s, "read_s": read_s}


async def run_demo(metadata: str, bookies: int, out: Out, tier_dir: Path | None = None) -> dict[str, Any]:
    """The ledgers, then the named log, then (with ``tier_dir``) its offload to a tier."""
    # Each part is one run of a fraction of a second: its time says the demo worked, not how
    # fast bkframe is (such runs swung 60-79k entries/s from one demo to the next).
    out("the demo's times are of single short runs, not a benchmark: 'bkframe bench appends' and "
        "'bkframe bench sweep' measure (docs/benchmarks/README.md)")
    async with open_client(metadata) as client:
        report = await demo_ledgers(client, bookies, out)
    report["log"] = await demo_log(metadata, bookies, out)
    if tier_dir is not None:
        report["tier"] = await demo_tier(metadata, tier_dir, out)
    return report


# -- the Spark pipeline --------------------------------------------------------------------


def spark_missing() -> str | None:
    """What the Spark pipeline needs and this machine lacks, said as what to do; None if nothing."""
    lacking = [name for name in ("pyspark", "bkframe_spark") if importlib.util.find_spec(name) is None]
    if lacking:
        return (
            f"the demo's Spark pipeline needs {' and '.join(lacking)}, which this Python ({sys.executable}) cannot "
            "import: install the workspace with 'uv sync --all-packages' (./scripts/sandbox does), "
            "or pass --no-spark to skip the pipeline"
        )
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return (
            "the demo's Spark pipeline needs Java 17 or newer and finds no 'java' on PATH (nor $JAVA_HOME): "
            "install one (Debian: apt-get install default-jre-headless; ./scripts/sandbox does), "
            "or pass --no-spark to skip the pipeline"
        )
    return None


async def run_spark_pipeline(metadata: str, data_dir: Path, out: Out, rows: int = SPARK_ROWS) -> dict[str, Any]:
    """Run :mod:`bkframe_spark.pipeline` in a child process; its lines go to our stdout,
    Spark's own log to ``DATA_DIR/spark-pipeline.log`` (shown in part if it fails)."""
    report_path = data_dir / "spark-pipeline.json"
    log_path = data_dir / "spark-pipeline.log"
    report_path.unlink(missing_ok=True)
    out(f"Spark pipeline (local[2], {rows} events into log {SPARK_EVENTS_LOG!r}, counts into {SPARK_COUNTS_LOG!r}; "
        f"Spark's log: {log_path})")
    command = [
        sys.executable, "-m", "bkframe_spark.pipeline", "--metadata", metadata, "--rows", str(rows),
        "--events", SPARK_EVENTS_LOG, "--counts", SPARK_COUNTS_LOG, "--replace", "--report", str(report_path),
    ]
    with log_path.open("wb") as log, trio.move_on_after(SPARK_TIMEOUT_S) as deadline:
        # Cancelling kills the child; its JVM exits when the pipe from its parent closes.
        proc = await trio.run_process(command, stderr=log, check=False)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
    if deadline.cancelled_caught:
        raise click.ClickException(
            f"the Spark pipeline did not finish within {SPARK_TIMEOUT_S:.0f} s and was stopped; "
            f"the end of {log_path}:\n{tail}"
        )
    if proc.returncode != 0 or not report_path.exists():
        raise click.ClickException(f"the Spark pipeline failed (exit status {proc.returncode}); the end of {log_path}:\n{tail}")
    report: dict[str, Any] = json.loads(report_path.read_text())
    return report
