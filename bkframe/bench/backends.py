"""``bkframe bench backends``: the same client, the same appends, under asyncio and under trio.

One run, one cluster (``--metadata``, or three bookie processes started for the run), the
backends alternating round by round (which goes first alternates too), so that drift on a
shared machine hits both alike. Each backend's turn opens a client under its own event loop
(``asyncio.run`` / ``trio.run``) and makes two runs on fresh ledgers: append throughput with
``--window`` appends in flight, and the latency of one append at a time (window 1, p50).
It prints each run, then the medians per backend and the ratios asyncio / trio, which
issue 37 wants at 0.9 or more for both (for latency: trio's p50 over asyncio's, so that
more is better on both), by the medians and by each backend's best run; CPU per entry
(the client process's, all threads) is the steadiest on a shared machine. ``--profile DIR``
writes each backend's cProfile stats there (``python -m pstats DIR/asyncio.prof``).
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import attrs
import click
import trio

from bkframe.bench.appends import append_timed
from bkframe.cli.options import AT_LEAST_ONE, BYTES, check_quorums
from bkframe.launcher import Cluster

BACKENDS = ("asyncio", "trio")


@attrs.frozen
class BackendRun:
    """One backend's turn in one round: a throughput run and a window-1 run."""

    backend: str
    round: int
    entries_per_s: float
    #: Client CPU (all its threads) per entry of the throughput run, microseconds.
    cpu_us: float
    p50_ms: float
    #: p50 of the window-1 run.
    w1_p50_ms: float
    w1_p99_ms: float

    def human(self) -> str:
        return (
            f"round {self.round} {self.backend:<7}: {self.entries_per_s:>9,.0f} entries/s "
            f"(p50 {self.p50_ms:.2f} ms, CPU {self.cpu_us:.1f} us/entry)  "
            f"window 1: p50 {self.w1_p50_ms:.3f} ms  p99 {self.w1_p99_ms:.3f} ms"
        )


@attrs.frozen
class Settings:
    entry_size: int
    count: int
    window: int
    latency_count: int
    ensemble: int
    write_quorum: int
    ack_quorum: int
    ledger_type: str


async def one_turn(metadata: str, settings: Settings, backend: str, round_: int) -> BackendRun:
    """A client opened under the running event loop, whichever it is: the code is the same."""
    from bkframe.client.client import open_client

    shape: dict[str, Any] = {
        "entry_size": settings.entry_size, "ensemble": settings.ensemble, "write_quorum": settings.write_quorum,
        "ack_quorum": settings.ack_quorum, "ledger_type": settings.ledger_type,
    }
    async with open_client(metadata) as client:
        # Untimed warm-up: connections to every bookie, the ledger id block, imports.
        await append_timed(client, count=200, window=32, **shape)
        cpu = time.process_time()
        throughput, _ = await append_timed(client, count=settings.count, window=settings.window, **shape)
        cpu = time.process_time() - cpu
        latency, _ = await append_timed(client, count=settings.latency_count, window=1, **shape)
    return BackendRun(
        backend=backend, round=round_, entries_per_s=throughput.entries_per_s, cpu_us=cpu / settings.count * 1e6,
        p50_ms=throughput.p50_ms, w1_p50_ms=latency.p50_ms, w1_p99_ms=latency.p99_ms,
    )


def run_on(backend: str, fn: Callable[[], Coroutine[Any, Any, BackendRun]], loop: str) -> BackendRun:
    """``fn()`` under a fresh event loop of ``backend``."""
    if backend == "trio":
        return trio.run(fn)
    if loop == "uvloop":
        import uvloop  # an optional extra: pip install uvloop

        return uvloop.run(fn())
    return asyncio.run(fn())


@attrs.frozen
class Summary:
    backend: str
    entries_per_s: float
    cpu_us: float
    w1_p50_ms: float


def summarize(runs: list[BackendRun]) -> dict[str, Summary]:
    """Per backend, the medians over the rounds."""
    out = {}
    for backend in sorted({r.backend for r in runs}):
        mine = [r for r in runs if r.backend == backend]
        out[backend] = Summary(
            backend, statistics.median(r.entries_per_s for r in mine), statistics.median(r.cpu_us for r in mine),
            statistics.median(r.w1_p50_ms for r in mine),
        )
    return out


def ratios(runs: list[BackendRun]) -> dict[str, float]:
    """asyncio / trio: throughput (medians' ratio, and the median of the rounds' ratios) and
    window-1 speed (trio's p50 over asyncio's: more is better, as for throughput)."""
    by_round: dict[int, dict[str, BackendRun]] = {}
    for r in runs:
        by_round.setdefault(r.round, {})[r.backend] = r
    pairs = [(d["asyncio"], d["trio"]) for d in by_round.values() if "asyncio" in d and "trio" in d]
    if not pairs:
        return {}
    s = summarize(runs)
    return {
        "throughput": s["asyncio"].entries_per_s / s["trio"].entries_per_s,
        "throughput_per_round_median": statistics.median(a.entries_per_s / t.entries_per_s for a, t in pairs),
        "window1_p50": s["trio"].w1_p50_ms / s["asyncio"].w1_p50_ms,
        "window1_p50_per_round_median": statistics.median(t.w1_p50_ms / a.w1_p50_ms for a, t in pairs),
        "cpu_per_entry": s["asyncio"].cpu_us / s["trio"].cpu_us,
        # On a shared machine others' load only ever slows a run: the best runs compare the
        # backends with the least of it.
        "throughput_best": best(runs, "asyncio").entries_per_s / best(runs, "trio").entries_per_s,
        "window1_p50_best": best(runs, "trio").w1_p50_ms / best(runs, "asyncio").w1_p50_ms,
    }


def best(runs: list[BackendRun], backend: str) -> BackendRun:
    """The backend's highest throughput and lowest window-1 p50 (of any of its runs)."""
    mine = [r for r in runs if r.backend == backend]
    top = max(mine, key=lambda r: r.entries_per_s)
    return attrs.evolve(top, w1_p50_ms=min(r.w1_p50_ms for r in mine))


def bench_backends(
    metadata: str, settings: Settings, *, rounds: int, backends: tuple[str, ...], loop: str = "asyncio",
    profile_dir: Path | None = None, echo: Callable[[str], None] = print,
) -> list[BackendRun]:
    runs: list[BackendRun] = []
    profiles = {b: cProfile.Profile() for b in backends} if profile_dir is not None else {}
    for i in range(rounds):
        order = backends if i % 2 == 0 else tuple(reversed(backends))
        for backend in order:
            profiler = profiles.get(backend)
            if profiler is not None:
                profiler.enable()
            try:
                run = run_on(backend, lambda b=backend, n=i: one_turn(metadata, settings, b, n), loop)  # type: ignore[misc]
            finally:
                if profiler is not None:
                    profiler.disable()
            echo(run.human())
            runs.append(run)
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        for backend, profiler in profiles.items():
            profiler.dump_stats(profile_dir / f"{backend}.prof")
    return runs


@click.command(name="backends")
@click.option("--metadata", help="Append on this cluster (default: start 3 bookie processes for the run).")
@click.option("--entry-size", type=BYTES, default=1024, show_default=True)
@click.option("--count", type=AT_LEAST_ONE, default=50_000, show_default=True, help="Appends of a throughput run.")
@click.option("--window", type=AT_LEAST_ONE, default=256, show_default=True, help="Appends in flight (throughput run).")
@click.option("--latency-count", type=AT_LEAST_ONE, default=2_000, show_default=True, help="Appends of a window-1 run.")
@click.option("--rounds", type=AT_LEAST_ONE, default=4, show_default=True, help="Rounds of (asyncio, trio).")
@click.option("-e", "--ensemble", type=int, default=3, show_default=True)
@click.option("-w", "--write-quorum", type=int, default=3, show_default=True)
@click.option("-a", "--ack-quorum", type=int, default=2, show_default=True)
@click.option("--type", "ledger_type", default="PD_JOURNAL", show_default=True)
@click.option("--backends", default=",".join(BACKENDS), show_default=True, help="Comma-separated: asyncio, trio.")
@click.option("--loop", type=click.Choice(["asyncio", "uvloop"]), default="asyncio", show_default=True,
              help="asyncio's event loop: the standard one, or uvloop (pip install uvloop; not a dependency).")
@click.option("--profile", "profile_dir", type=click.Path(path_type=Path), help="Write BACKEND.prof (cProfile) here.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line per run, then the ratios.")
def backends(
    metadata: str | None, entry_size: int, count: int, window: int, latency_count: int, rounds: int, ensemble: int,
    write_quorum: int, ack_quorum: int, ledger_type: str, backends: str, loop: str, profile_dir: Path | None,
    as_json: bool,
) -> None:
    """The client's append throughput (--window in flight) and window-1 latency under asyncio
    and under trio, alternating in one run on one cluster; prints the asyncio / trio ratios."""
    check_quorums(ensemble, write_quorum, ack_quorum)
    chosen = tuple(b.strip() for b in backends.split(",") if b.strip())
    unknown = [b for b in chosen if b not in BACKENDS]
    if unknown or not chosen:
        raise click.BadParameter(f"{', '.join(unknown) or 'none'}: choose among {', '.join(BACKENDS)}", param_hint="--backends")
    if loop == "uvloop":
        try:
            import uvloop  # noqa: F401 - only whether it is installed
        except ImportError:
            raise click.UsageError("--loop uvloop needs uvloop: pip install uvloop") from None
    settings = Settings(entry_size, count, window, latency_count, ensemble, write_quorum, ack_quorum, ledger_type)
    echo: Callable[[str], None] = (lambda _line: None) if as_json else click.echo

    def go(uri: str) -> list[BackendRun]:
        return bench_backends(uri, settings, rounds=rounds, backends=chosen, loop=loop, profile_dir=profile_dir, echo=echo)

    if metadata:
        runs = go(metadata)
    else:
        with tempfile.TemporaryDirectory(prefix="bkframe-bench-backends-") as tmp:
            cluster = Cluster(Path(tmp), max(3, ensemble)).start(parallel=True)
            try:
                runs = go(cluster.metadata)
            finally:
                cluster.stop(timeout_s=30.0)
                cluster.close()
    result: dict[str, Any] = ratios(runs)
    if as_json:
        for run in runs:
            click.echo(json.dumps(attrs.asdict(run)))
        click.echo(json.dumps({"ratios": result, "loop": loop}))
        return
    for s in summarize(runs).values():
        click.echo(f"median {s.backend:<7}: {s.entries_per_s:>9,.0f} entries/s, CPU {s.cpu_us:.1f} us/entry, "
                   f"window-1 p50 {s.w1_p50_ms:.3f} ms")
    if result:
        click.echo(
            f"asyncio / trio: throughput {result['throughput']:.3f} (per round {result['throughput_per_round_median']:.3f}), "
            f"window-1 p50 speed {result['window1_p50']:.3f} (per round {result['window1_p50_per_round_median']:.3f}), "
            f"CPU per entry {result['cpu_per_entry']:.3f}; best runs: throughput {result['throughput_best']:.3f}, "
            f"window-1 p50 speed {result['window1_p50_best']:.3f}" + (" [uvloop]" if loop == "uvloop" else "")
        )
