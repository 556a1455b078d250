"""``bkframe bench log``: appends through a named log that rolls over vs into one ledger.

Both runs drive the same pipelined load (``window`` appends in flight, fixed-size random
payloads) from one client, alternating ledger and log runs so that drift on a shared
machine hits both alike. Each run uses a fresh ledger or log, deleted afterwards.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
import click
import numpy as np

from bkframe.bench.appends import Load, Throughput
from bkframe.cli import interrupt
from bkframe.cli.log import run_on_logs
from bkframe.cli.options import AT_LEAST_ONE, BYTES, auth_token_option, check_quorums, metadata_option
from bkframe.client.logs.api import Logs


@attrs.frozen
class LogBenchResult(Throughput):
    #: Segments the log ended with (1 for the ledger run).
    segments: int
    #: CPU time of the client process per entry (all its threads): the log layer's cost,
    #: steadier than throughput on a shared machine.
    client_cpu_us: float
    #: CPU time of the bookies per entry, when they run on this machine (else None).
    bookies_cpu_us: float | None = None

    def human(self) -> str:
        return (
            f"{self.mode}: {self.count} entries of {self.entry_size} B, window {self.window}, {self.seconds:.2f} s, "
            f"{self.segments} segment(s)\n"
            f"  {self.entries_per_s:,.0f} entries/s  {self.mb_per_s:,.1f} MB/s  "
            f"latency p50 {self.p50_ms:.3f} ms  p99 {self.p99_ms:.3f} ms\n"
            f"  CPU per entry: client {self.client_cpu_us:.1f} us"
            + (f", bookies {self.bookies_cpu_us:.1f} us" if self.bookies_cpu_us is not None else "")
        )


async def _drive(
    append: Callable[[bytes], Any], check: Callable[[Any], None], *, payload: bytes, count: int, window: int
) -> tuple[float, float, np.ndarray[Any, np.dtype[np.float64]]]:
    latencies = np.empty(count, dtype=np.float64)
    inflight: deque[tuple[float, Any]] = deque()
    cpu = time.process_time()
    start = time.perf_counter()
    submitted = done = 0
    while done < count:
        while submitted < count and len(inflight) < window:
            inflight.append((time.perf_counter(), append(payload)))
            submitted += 1
        await inflight[0][1].wait()
        now = time.perf_counter()
        while inflight and inflight[0][1].done():
            sent, pending = inflight.popleft()
            check(pending)
            latencies[done] = now - sent
            done += 1
    return time.perf_counter() - start, time.process_time() - cpu, latencies


async def _drive_batches(
    append_many: Callable[[list[bytes]], Any], wait: Callable[[Any], Any], *, payload: bytes, count: int, window: int,
    batch: int,
) -> tuple[float, float, np.ndarray[Any, np.dtype[np.float64]]]:
    """``_drive`` with ``append_many`` calls of ``batch`` entries, up to ``window`` entries in flight."""
    latencies = np.empty(count, dtype=np.float64)
    inflight: deque[tuple[float, int, Any]] = deque()
    cpu = time.process_time()
    start = time.perf_counter()
    submitted = done = flying = 0
    while done < count:
        while submitted < count and (flying == 0 or flying + batch <= window):
            k = min(batch, count - submitted)
            inflight.append((time.perf_counter(), k, append_many([payload] * k)))
            submitted += k
            flying += k
        sent, k, pending = inflight.popleft()
        await wait(pending)
        latencies[done : done + k] = time.perf_counter() - sent
        done += k
        flying -= k
    return time.perf_counter() - start, time.process_time() - cpu, latencies


async def _wait_ledger_batch(pendings: list[Any]) -> None:
    await pendings[-1].wait()  # appends complete in order; a failure fails the later ones


async def _wait_log_batch(pending: Any) -> None:
    await pending.wait()


def _result(
    mode: str, entry_size: int, count: int, window: int, seconds: float, cpu: float, lat: Any, segments: int
) -> LogBenchResult:
    return LogBenchResult(
        mode=mode, entry_size=entry_size, count=count, window=window, seconds=seconds,
        entries_per_s=count / seconds, mb_per_s=count * entry_size / seconds / 1e6,
        p50_ms=float(np.percentile(lat, 50) * 1e3), p99_ms=float(np.percentile(lat, 99) * 1e3), segments=segments,
        client_cpu_us=cpu / count * 1e6,
    )


def _local_cpu_s(pids: list[int]) -> float | None:
    """User + system CPU seconds of these local processes, or None if one is not here."""
    total = 0.0
    try:
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return total


def _check_ledger_append(pending: Any) -> None:
    if pending.error is not None:
        raise pending.error


def _check_log_append(pending: Any) -> None:
    pending.result()


async def bench_ledger_vs_log(
    logs: Logs,
    load: Load,
    *,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    ledger_type: str,
    rollover_entries: int,
    rounds: int,
    batch: int = 0,
) -> list[LogBenchResult]:
    """``batch`` > 0: both runs append with ``append_many`` of that many entries (the log's
    bookkeeping then is per batch); 0: one ``append_async`` per entry.

    Long on purpose: a benchmark reads as what it times, in the order it times it (ledger, then
    log, per round).
    """
    entry_size, count, window = load.entry_size, load.count, load.window
    client = logs.client
    payload = os.urandom(entry_size)
    out: list[LogBenchResult] = []
    local = ("127.0.0.1:", "localhost:", "[::1]:")
    bookie_pids = [b.pid for b in await client.metadata.list_bookies() if b.pid and b.address.startswith(local)]

    async def measured(run: Callable[[], Any]) -> LogBenchResult:
        before = _local_cpu_s(bookie_pids) if bookie_pids else None
        result: LogBenchResult = await run()
        after = _local_cpu_s(bookie_pids) if before is not None else None
        if before is None or after is None:
            return result
        return attrs.evolve(result, bookies_cpu_us=(after - before) / count * 1e6)

    async def appends(
        writer: Any, check: Callable[[Any], None], wait_batch: Callable[[Any], Any]
    ) -> tuple[float, float, np.ndarray[Any, np.dtype[np.float64]]]:
        """The timed appends to a ledger's or a log's writer, one at a time or in batches."""
        if batch:
            return await _drive_batches(
                writer.append_many_async, wait_batch, payload=payload, count=count, window=window, batch=batch
            )
        return await _drive(writer.append_async, check, payload=payload, count=count, window=window)

    async def ledger_run() -> LogBenchResult:
        writer = await client.create_ledger(
            ensemble=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum, ledger_type=ledger_type
        )
        try:
            seconds, cpu, lat = await appends(writer, _check_ledger_append, _wait_ledger_batch)
            await writer.close()
        finally:
            with interrupt.closing():  # stopped by a signal too: the bench's ledger goes
                await client.delete_ledger(writer.ledger_id)
                interrupt.closed(f"its ledger {writer.ledger_id} deleted")
        return _result("ledger", entry_size, count, window, seconds, cpu, lat, 1)

    async def log_run() -> LogBenchResult:
        name = f"bench-{uuid.uuid4().hex[:12]}"
        await logs.create(
            name, ensemble=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum, ledger_type=ledger_type,
            rollover_entries=rollover_entries,
        )
        try:
            writer = await logs.open_writer(name)
            seconds, cpu, lat = await appends(writer, _check_log_append, _wait_log_batch)
            md = await writer.close()
        finally:
            with interrupt.closing():  # stopped by a signal too: the bench's log goes (its writer fails)
                await logs.delete(name)
                interrupt.closed(f"its log {name} deleted")
        return _result("log", entry_size, count, window, seconds, cpu, lat, len(md.segments))

    for i in range(rounds):
        # Alternate which goes first, so that drift on a shared machine hits both alike.
        order = (ledger_run, log_run) if i % 2 == 0 else (log_run, ledger_run)
        for run in order:
            out.append(await measured(run))
    return out


def ratios(rows: list[LogBenchResult]) -> tuple[float, float]:
    """(median of the per-round log/ledger ratios, ratio of the totals) of entries/s."""
    ledger = [r for r in rows if r.mode == "ledger"]
    log = [r for r in rows if r.mode == "log"]
    per_round = sorted(b.entries_per_s / a.entries_per_s for a, b in zip(ledger, log))
    mid = len(per_round) // 2
    median = per_round[mid] if len(per_round) % 2 else (per_round[mid - 1] + per_round[mid]) / 2
    total = (sum(r.count for r in log) / sum(r.seconds for r in log)) / (
        sum(r.count for r in ledger) / sum(r.seconds for r in ledger)
    )
    return median, total


@click.command(name="log")
@metadata_option()
@auth_token_option
@click.option("--entry-size", type=BYTES, default=1024, show_default=True)
@click.option("--count", type=AT_LEAST_ONE, default=100_000, show_default=True)
@click.option("--window", type=AT_LEAST_ONE, default=256, show_default=True, help="Appends in flight at most.")
@click.option("-e", "--ensemble", type=int, default=3, show_default=True)
@click.option("-w", "--write-quorum", type=int, default=3, show_default=True)
@click.option("-a", "--ack-quorum", type=int, default=2, show_default=True)
@click.option("--type", "ledger_type", default="PD_JOURNAL", show_default=True)
@click.option("--rollover-entries", type=AT_LEAST_ONE, default=10_000, show_default=True)
@click.option("--rounds", type=AT_LEAST_ONE, default=2, show_default=True, help="Rounds of (one ledger, one log).")
@click.option("--batch", type=click.IntRange(min=0), default=0, show_default=True,
              help="Append with append_many of this many entries (0: append_async per entry).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line per run.")
def log(
    metadata: str, entry_size: int, count: int, window: int, ensemble: int, write_quorum: int, ack_quorum: int,
    ledger_type: str, rollover_entries: int, rounds: int, batch: int, as_json: bool,
) -> None:
    """Appends through a log that rolls over every --rollover-entries vs the same load into
    one ledger, alternating, in one run; prints both and the ratio."""
    check_quorums(ensemble, write_quorum, ack_quorum)
    rows = run_on_logs(
        metadata,
        lambda logs: bench_ledger_vs_log(
            logs, Load(entry_size, count, window), ensemble=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum,
            ledger_type=ledger_type, rollover_entries=rollover_entries, rounds=rounds, batch=batch,
        ),
    )
    for row in rows:
        click.echo(json.dumps(attrs.asdict(row)) if as_json else row.human())
    if rows and not as_json:
        median, total = ratios(rows)
        click.echo(f"log / ledger entries/s: median of {rounds} round(s) {median:.3f}, all runs together {total:.3f}")
