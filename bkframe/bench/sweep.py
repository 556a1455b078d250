"""``bkframe bench sweep``: the benchmark sweep of issue 14, its JSON and its plots.

Entry sizes x ledger types x windows, each cell a fresh ledger E=3 W=3 A=2 appended through
the client library (:func:`bkframe.bench.appends.append_timed`, the code of ``bkframe bench appends
--metadata``) on a fresh cluster of 3 bookie processes per entry size. Optionally, in the same
run, the round-trip floors and the peers of the shared peer benchmark (``--peer-bench DIR``,
the folder of ``floor.py`` and ``peers.py``). Writes ``sweep.json`` and the PNG plots of
:mod:`bkframe.bench.plots` into ``--out-dir`` (by default a new folder, so that a run never
overwrites the committed figures); ``benchmarks/sweep`` runs it into docs/benchmarks.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import click
import numpy as np
import trio

from bkframe.bench.appends import append_timed
from bkframe.cli import interrupt
from bkframe.launcher import Cluster

SIZES = (100, 1024, 4096, 65536)
TYPES = ("PD_JOURNAL", "VD_JOURNAL", "BYPASS_JOURNAL")
WINDOWS = (1, 16, 256)
#: Appends per cell at scale 1, by window then entry size: each cell takes about 1-3 s here.
COUNTS: dict[int, dict[int, int]] = {
    1: {100: 2000, 1024: 2000, 4096: 1500, 65536: 1000},
    16: {100: 20000, 1024: 20000, 4096: 10000, 65536: 2000},
    256: {100: 150000, 1024: 80000, 4096: 30000, 65536: 5000},
}
#: Points of the latency CDF kept for window-1 cells (quantiles 0, 0.5%, ..., 100%).
CDF_POINTS = 201
#: The peers run in the sweep when their servers are installed (see the peer benchmark's README).
PEER_SYSTEMS = ("redis-always", "nats-r3")
PEER_TIMEOUT_S = 900.0
FLOOR_TIMEOUT_S = 300.0
FLOOR_LINE = re.compile(r"p50 ([\d.]+) ms p99 ([\d.]+) ms (\d+) appends/s")


@attrs.frozen
class SweepSettings:
    sizes: tuple[int, ...] = SIZES
    types: tuple[str, ...] = TYPES
    windows: tuple[int, ...] = WINDOWS
    #: Multiplies every count of COUNTS (at least 10 appends a cell).
    scale: float = 1.0

    def count(self, size: int, window: int) -> int:
        base = COUNTS[window][size] if window in COUNTS and size in COUNTS[window] else 2000
        return max(10, round(base * self.scale))


def _quantiles_ms(latencies: np.ndarray, points: int) -> list[float]:
    return [round(float(v) * 1e3, 4) for v in np.quantile(latencies, np.linspace(0.0, 1.0, points))]


async def _sweep_one_size(metadata: str, size: int, settings: SweepSettings, types: tuple[str, ...]) -> list[dict[str, Any]]:
    from bkframe.client.client import open_client

    cells: list[dict[str, Any]] = []
    async with open_client(metadata) as client:
        # Untimed: connects to the bookies and warms their paths before the first timed cell.
        await append_timed(client, entry_size=size, count=settings.count(size, 16) // 10 + 10, window=16,
                           ledger_type="PD_JOURNAL", ensemble=3, write_quorum=3, ack_quorum=2)
        for ledger_type in types:
            for window in settings.windows:
                count = settings.count(size, window)
                result, latencies = await append_timed(
                    client, entry_size=size, count=count, window=window, ledger_type=ledger_type, final_sync=True,
                    ensemble=3, write_quorum=3, ack_quorum=2,
                )
                cell: dict[str, Any] = {
                    "entry_size": size, "ledger_type": ledger_type, "window": window, "count": count,
                    "seconds": round(result.seconds, 4),
                    "entries_per_s": round(result.entries_per_s, 1),
                    "mb_per_s": round(result.mb_per_s, 3),
                    "p50_ms": round(result.p50_ms, 4),
                    "p90_ms": round(float(np.percentile(latencies, 90)) * 1e3, 4),
                    "p99_ms": round(result.p99_ms, 4),
                    "max_ms": round(float(latencies.max()) * 1e3, 4),
                    "bytes_written_per_payload_byte": round(result.bookie_bytes_written / result.payload_bytes, 3),
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                }
                if window == 1:
                    cell["latency_cdf_ms"] = _quantiles_ms(latencies, CDF_POINTS)
                click.echo(
                    f"  {size:>6} B {ledger_type:<14} window {window:>3}: {result.entries_per_s:>10,.0f} entries/s "
                    f"{result.mb_per_s:>7.1f} MB/s  p50 {result.p50_ms:.3f} ms  p99 {result.p99_ms:.3f} ms",
                    err=True,
                )
                cells.append(cell)
                # Untimed: write back this cell's dirty pages so the next cell does not pay for them.
                await trio.to_thread.run_sync(os.sync)
    return cells


def run_cells(root: Path, settings: SweepSettings) -> list[dict[str, Any]]:
    """Every (size, type, window) cell. A fresh 3-bookie cluster per entry size, sizes in
    ascending order, its data deleted and the page cache written back (``os.sync``) before the
    next size, and written back after every cell too, so that no cell inherits the dirty
    pages of the one before (64 KiB cells leave gigabytes).
    The ledger types' order rotates from one size to the next, so none is always first."""
    cells: list[dict[str, Any]] = []
    for index, size in enumerate(sorted(settings.sizes)):
        shift = index % len(settings.types)
        types = settings.types[shift:] + settings.types[:shift]
        cluster_root = root / f"cluster-{size}"
        cluster_root.mkdir(parents=True)
        cluster = Cluster(cluster_root, 3).start(parallel=True)
        click.echo(f"bench sweep: {size} B entries on a fresh cluster ({', '.join(types)})", err=True)
        try:
            cells.extend(interrupt.run(_sweep_one_size, cluster.metadata, size, settings, types))
        finally:
            cluster.stop(timeout_s=30.0)
            cluster.close()
            shutil.rmtree(cluster_root, ignore_errors=True)
            os.sync()
    return cells


def run_floors(peer_bench: Path, sizes: tuple[int, ...], count: int) -> list[dict[str, Any]]:
    """``floor.py`` (bare round trip, and with an fdatasync per append) at each entry size."""
    floors: list[dict[str, Any]] = []
    for size in sizes:
        for kind in ("echo", "fsync"):
            command = [sys.executable, str(peer_bench / "floor.py"), "--size", str(size), "--count", str(count)]
            command += ["--fsync"] if kind == "fsync" else []
            out = subprocess.run(command, capture_output=True, text=True, timeout=FLOOR_TIMEOUT_S, check=True).stdout
            match = FLOOR_LINE.search(out)
            if match is None:
                raise click.ClickException(f"floor.py printed no figures: {out!r}")
            floors.append({
                "kind": kind, "entry_size": size, "count": count, "p50_ms": float(match[1]), "p99_ms": float(match[2]),
                "appends_per_s": int(match[3]), "command": " ".join(command[1:]),
            })
            click.echo(f"  floor {kind} {size} B: p50 {match[1]} ms", err=True)
    return floors


def run_peers(peer_bench: Path, sizes: tuple[int, ...], counts: list[int], out: Path) -> dict[str, Any]:
    """``peers.py`` for PEER_SYSTEMS whose servers are installed (it installs its Python clients
    in a venv of its own); its results, or why it did not run."""
    systems = [s for s in PEER_SYSTEMS if shutil.which(s.split("-")[0] + "-server")]
    if not systems:
        return {"skipped": "neither redis-server nor nats-server is installed", "results": []}
    python3 = shutil.which("python3") or sys.executable
    command = [python3, str(peer_bench / "peers.py"), "--systems", ",".join(systems),
               "--sizes", ",".join(map(str, sizes)), "--counts", ",".join(map(str, counts)), "--out", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=PEER_TIMEOUT_S, check=False)
    if not out.exists():
        return {"skipped": f"peers.py exited {proc.returncode}: {proc.stderr[-500:]}", "results": []}
    data = json.loads(out.read_text())
    keep = ("system", "size", "count", "records_per_s", "MB_per_s", "lat_p50_ms", "lat_p99_ms", "verified", "durability", "error")
    return {
        "command": " ".join(["python3", *command[1:]]),
        "versions": data["meta"].get("versions", {}),
        "results": [{k: r[k] for k in keep if k in r} for r in data["results"]],
    }


def machine() -> dict[str, Any]:
    def first(path: str, prefix: str) -> str | None:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            return None
        return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith(prefix)), None)

    return {
        "platform": platform.platform(), "cpus": os.cpu_count(), "cpu": first("/proc/cpuinfo", "model name"),
        "memory": first("/proc/meminfo", "MemTotal"), "python": platform.python_version(),
    }


def commit() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


def run_sweep(settings: SweepSettings, *, peer_bench: Path | None, notes: tuple[str, ...] = ()) -> dict[str, Any]:
    """The whole sweep: floors first (a quiet machine), then bkframe's cells, then the peers."""
    started = time.monotonic()
    sweep: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(["bkframe", *sys.argv[1:]]),
        **commit(),
        "machine": machine(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "notes": list(notes),
        "settings": {
            **attrs.asdict(settings), "ensemble": 3, "write_quorum": 3, "ack_quorum": 2,
            "counts": {str(w): {str(s): settings.count(s, w) for s in settings.sizes} for w in settings.windows},
            "cluster": "3 bookie processes (bkframe bookie, default config) on sqlite metadata, fresh per entry size",
            "timed": "first append to last ack, then sync() (PD: returns at once); per cell a new ledger",
            "between cells": "os.sync(), untimed: no cell inherits the dirty pages of the one before",
        },
        "floors": [], "peers": {"skipped": "no --peer-bench", "results": []},
    }
    with tempfile.TemporaryDirectory(prefix="bkframe-sweep-") as tmp:
        if peer_bench is not None:
            sweep["floors"] = run_floors(peer_bench, settings.sizes, max(100, round(2000 * settings.scale)))
        sweep["cells"] = run_cells(Path(tmp), settings)
        if peer_bench is not None:
            click.echo("bench sweep: peers", err=True)
            counts = [max(1000, round(c * settings.scale)) for c in (100000, 50000, 20000, 5000)]
            by_size = dict(zip(SIZES, counts))
            sweep["peers"] = run_peers(peer_bench, settings.sizes, [by_size.get(s, 5000) for s in settings.sizes],
                                       Path(tmp) / "peers.json")
    sweep["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    sweep["duration_s"] = round(time.monotonic() - started, 1)
    return sweep


def markdown_tables(sweep: dict[str, Any]) -> str:
    """The cells, the floors and the peers as markdown tables (for docs/benchmarks/sweep.md)."""
    lines = ["| entry B | type | window | count | entries/s | MB/s | p50 ms | p99 ms |", "|---|---|---|---|---|---|---|---|"]
    for c in sorted(sweep["cells"], key=lambda c: (c["entry_size"], TYPES.index(c["ledger_type"]), c["window"])):
        lines.append(
            f"| {c['entry_size']:,} | {c['ledger_type']} | {c['window']} | {c['count']:,} | {c['entries_per_s']:,.0f} "
            f"| {c['mb_per_s']:,.1f} | {c['p50_ms']:.2f} | {c['p99_ms']:.2f} |"
        )
    if sweep["floors"]:
        lines += ["", "| floor (window 1, 2 of 3 answers) | entry B | p50 ms | p99 ms | appends/s |", "|---|---|---|---|---|"]
        lines += [f"| {f['kind']} | {f['entry_size']:,} | {f['p50_ms']:.3f} | {f['p99_ms']:.3f} | {f['appends_per_s']:,} |"
                  for f in sweep["floors"]]
    if sweep["peers"]["results"]:
        lines += ["", "| peer | entry B | count | records/s | MB/s | p50 ms | p99 ms |", "|---|---|---|---|---|---|---|"]
        for r in sweep["peers"]["results"]:
            if "error" in r:
                lines.append(f"| {r['system']} | {r['size']:,} | {r['count']:,} | failed: {r['error']} | | | |")
            else:
                lines.append(f"| {r['system']} | {r['size']:,} | {r['count']:,} | {r['records_per_s']:,.0f} "
                             f"| {r['MB_per_s']:,.1f} | {r['lat_p50_ms']:.2f} | {r['lat_p99_ms']:.2f} |")
    return "\n".join(lines)


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r} should be whole numbers >= 1 separated by commas, e.g. 1024,65536",
                                 param_hint=option)
    return values


@click.command("sweep")
@click.option("--out-dir", type=click.Path(path_type=Path), default=None,
              help="Where sweep.json and the PNG plots go (default: a new folder bench-sweep-<UTC time> here; "
              "benchmarks/sweep gives docs/benchmarks).")
@click.option("--quick", is_flag=True, help="A quarter of the counts (about a minute here).")
@click.option("--scale", type=float, default=None, help="Multiply every count by this (overrides --quick).")
@click.option("--sizes", default=",".join(map(str, SIZES)), show_default=True, help="Entry sizes in bytes.")
@click.option("--windows", default=",".join(map(str, WINDOWS)), show_default=True, help="Appends in flight.")
@click.option("--peer-bench", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="Folder of floor.py and peers.py: run the floors and the peers in the same run.")
@click.option("--note", "notes", multiple=True, help="A caveat to keep in the JSON (repeatable).")
@click.option("--no-plots", is_flag=True, help="Write only the JSON.")
def sweep(out_dir: Path | None, quick: bool, scale: float | None, sizes: str, windows: str, peer_bench: Path | None,
                notes: tuple[str, ...], no_plots: bool) -> None:
    """Sweep entry sizes x ledger types x windows through the client library on fresh 3-bookie
    clusters (E=3 W=3 A=2); write sweep.json and PNG plots."""
    if scale is None:
        scale = 0.25 if quick else 1.0
    settings = SweepSettings(sizes=_ints(sizes, "--sizes"), windows=_ints(windows, "--windows"), scale=scale)
    if out_dir is None:
        # A new folder of its own: never over the committed figures in docs/benchmarks, nor an earlier run.
        out_dir = Path(f"bench-sweep-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}")
        out_dir.mkdir(parents=True, exist_ok=False)
        click.echo(f"bench sweep: writing to {out_dir.resolve()} (--out-dir chooses)", err=True)
    out_dir.mkdir(parents=True, exist_ok=True)  # before the sweep: a wrong --out-dir fails now, not in minutes
    sweep = run_sweep(settings, peer_bench=peer_bench, notes=notes)
    (out_dir / "sweep.json").write_text(json.dumps(sweep, indent=1) + "\n")
    click.echo(f"wrote {out_dir / 'sweep.json'} ({sweep['duration_s']} s)")
    if not no_plots:
        try:
            from bkframe.bench.plots import write_plots
        except ImportError as e:
            raise click.ClickException(f"no plots: {e} (install the extra: pip install 'bkframe[bench]')") from None
        for path in write_plots(sweep, out_dir):
            click.echo(f"wrote {path}")
    click.echo(markdown_tables(sweep))
