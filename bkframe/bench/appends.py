"""``bkframe bench appends``: drive a bookie with pipelined adds and report throughput and latency."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any, cast

import attrs
import click
import numpy as np

from bkframe.cli import interrupt
from bkframe.cli.options import AT_LEAST_ONE, BYTES, check_quorums, client_security
from bkframe.client.bookies.connection import connect_bookie
from bkframe.client.bookies.pending_response import PendingResponse
from bkframe.launcher import BookieProcess
from bkframe.proto.codes import Status


@attrs.frozen
class Throughput:
    """What every append benchmark measures: the run, its rate and its latency."""

    mode: str
    entry_size: int
    count: int
    window: int
    seconds: float
    entries_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float


@attrs.frozen
class BenchResult(Throughput):
    #: Only in bookie mode (one bookie's journal); None through the client.
    fsyncs_per_s: float | None
    entries_per_fsync: float | None
    payload_bytes: int
    bookie_bytes_written: int

    @classmethod
    def measured(
        cls, mode: str, *, entry_size: int, count: int, window: int, seconds: float, latencies: np.ndarray,
        written: int, fsyncs: int | None = None,
    ) -> BenchResult:
        """The figures of ``count`` appends that took ``seconds`` (each's latency in seconds);
        ``fsyncs``: of one bookie's journal meanwhile (bookie mode only)."""
        return cls(
            mode=mode,
            entry_size=entry_size,
            count=count,
            window=window,
            seconds=seconds,
            entries_per_s=count / seconds,
            mb_per_s=count * entry_size / seconds / 1e6,
            p50_ms=float(np.percentile(latencies, 50) * 1e3),
            p99_ms=float(np.percentile(latencies, 99) * 1e3),
            fsyncs_per_s=None if fsyncs is None else fsyncs / seconds,
            entries_per_fsync=None if fsyncs is None else (count / fsyncs if fsyncs else float("inf")),
            payload_bytes=count * entry_size,
            bookie_bytes_written=written,
        )

    def human(self) -> str:
        return (
            f"{self.mode}: {self.count} entries of {self.entry_size} B, window {self.window}, {self.seconds:.2f} s\n"
            f"  {self.entries_per_s:,.0f} entries/s  {self.mb_per_s:,.1f} MB/s\n"
            f"  latency p50 {self.p50_ms:.3f} ms  p99 {self.p99_ms:.3f} ms\n"
            + (f"  {self.fsyncs_per_s:,.0f} fsyncs/s  {self.entries_per_fsync:,.1f} entries per fsync\n"
               if self.fsyncs_per_s is not None and self.entries_per_fsync is not None else "")
            + f"  bookie wrote {self.bookie_bytes_written:,} bytes for {self.payload_bytes:,} payload bytes"
        )


async def bench_bookie(host: str, port: int, *, entry_size: int, count: int, window: int, ledger_id: int) -> BenchResult:
    """Append ``count`` entries to one ledger of one bookie with ``window`` in flight."""
    payload = os.urandom(entry_size)
    key = b"bench-key"
    latencies = np.empty(count, dtype=np.float64)
    async with connect_bookie(host, port) as bookie:
        before = (await bookie.info())["counters"]
        # Each refill of the window goes out as one ADD_BATCH, as the client library does.
        inflight: deque[tuple[int, int, float, PendingResponse]] = deque()
        start = time.perf_counter()
        next_entry = 0
        done = 0
        in_window = 0
        while done < count:
            room = min(window - in_window, count - next_entry)
            if room > 0:
                ids = list(range(next_entry, next_entry + room))
                pending = bookie.submit_add_batch(ledger_id, ids, [payload] * room, master_key=key, lac=done - 1)
                inflight.append((next_entry, room, time.perf_counter(), pending))
                next_entry += room
                in_window += room
            first, n, sent, pending = inflight.popleft()
            response = await pending.wait()
            if response.status != Status.OK:
                raise click.ClickException(f"adds from {first} failed: {response.status.name} {response.message}")
            latencies[done : done + n] = time.perf_counter() - sent
            done += n
            in_window -= n
        seconds = time.perf_counter() - start
        after = (await bookie.info())["counters"]
    fsyncs = after["journal_fsyncs"] - before["journal_fsyncs"]
    written = sum(after[k] - before[k] for k in ("journal_bytes_written", "storage_bytes_written"))
    return BenchResult.measured(
        "bookie", entry_size=entry_size, count=count, window=window, seconds=seconds, latencies=latencies,
        written=written, fsyncs=fsyncs,
    )


async def _bookie_bytes(client: Any, bookie_ids: list[str]) -> int:
    total = 0
    for bookie_id in bookie_ids:
        c = (await (await client.pool.get(bookie_id)).info())["counters"]
        total += c["journal_bytes_written"] + c["storage_bytes_written"]
    return total


async def append_timed(
    client: Any,
    *,
    entry_size: int,
    count: int,
    window: int,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    ledger_type: str,
    progress: bool = False,
    sync_every: int = 0,
    final_sync: bool = False,
) -> tuple[BenchResult, np.ndarray]:
    """Append ``count`` entries to a new ledger of an open client, ``window`` in flight; return
    the figures and each append's latency in seconds (in completion order). ``final_sync``
    times a ``sync()`` after the last append, so that VD_JOURNAL's figures include making
    its entries durable.

    Long on purpose: the timed loop and its window are one piece of code, so that nothing
    between two appends is hidden in a call.
    """
    payload = os.urandom(entry_size)
    latencies = np.empty(count, dtype=np.float64)
    writer = await client.create_ledger(
        ensemble=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum, ledger_type=ledger_type, password=b"bench"
    )
    bookies = list(writer.metadata.fragments[0][1])
    try:
        before = await _bookie_bytes(client, bookies)
        bar = click.progressbar(length=count, file=sys.stderr, label="appending") if progress else None
        inflight: deque[tuple[float, Any]] = deque()
        start = time.perf_counter()
        submitted = done = 0
        while done < count:
            while submitted < count and len(inflight) < window:
                inflight.append((time.perf_counter(), writer.append_async(payload)))
                submitted += 1
                if sync_every and submitted % sync_every == 0:
                    break
            await inflight[0][1].wait()
            now = time.perf_counter()
            finished = 0
            while inflight and inflight[0][1].done():
                sent, pending = inflight.popleft()
                if pending.error is not None:
                    raise pending.error
                latencies[done] = now - sent
                done += 1
                finished += 1
            if bar is not None:
                bar.update(finished)
            if sync_every and done % sync_every == 0 and not inflight:
                await writer.sync()
        if final_sync:
            await writer.sync()
        seconds = time.perf_counter() - start
        await writer.close()
        if bar is not None:
            bar.render_finish()
        written = await _bookie_bytes(client, list(writer.metadata.bookies())) - before
        mode = (
            f"client {ledger_type} E={ensemble} W={write_quorum} A={ack_quorum}"
            + (f" sync every {sync_every}" if sync_every else "")
            + (" then sync" if final_sync else "")
        )
        result = BenchResult.measured(
            mode, entry_size=entry_size, count=count, window=window, seconds=seconds, latencies=latencies,
            written=written,
        )
        return result, latencies
    finally:
        if interrupt.interrupted():  # stopped by a signal: closed at its last acknowledged entry
            await interrupt.close_ledger(writer)


@attrs.frozen
class Load:
    """What each run appends: ``count`` entries of ``entry_size`` bytes, ``window`` in flight."""

    entry_size: int
    count: int
    window: int


#: How long bench's own bookie may take to stop (SIGTERM: it drains and flushes) before SIGKILL.
STOP_TIMEOUT_S = 60.0


@attrs.frozen
class OneBookie:
    """Bookie mode: raw adds to one ledger of one bookie with no metadata store -- the one at
    ``address``, else one started for the run (in ``data_dir``, with ``config_path``)."""

    address: str | None
    data_dir: Path | None
    config_path: Path | None
    ledger_id: int

    def run(self, load: Load) -> BenchResult:
        if self.address:
            host, _, port = self.address.rpartition(":")
            return interrupt.run(lambda: self._adds(host, int(port), load))
        with contextlib.ExitStack() as stack:
            data_dir = self.data_dir
            if data_dir is None:
                data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bkframe-bench-"))) / "bookie"
            return interrupt.run(self._on_private_bookie, data_dir, load)

    async def _on_private_bookie(self, data_dir: Path, load: Load) -> BenchResult:
        """The run on a bookie started for it, from its spawn to its stop inside
        :func:`interrupt.run`: a signal at any moment -- while the bookie starts, while the
        adds run -- cancels the run, and the bookie is stopped here (SIGTERM, then SIGKILL
        after :data:`STOP_TIMEOUT_S`). Bench SIGKILLed, the bookie gets SIGTERM from the
        kernel (``die_with_parent``)."""
        import trio

        bookie = BookieProcess(data_dir, die_with_parent=True)
        try:
            # Spawned in this thread, the main one: the bookie's death signal comes when the
            # thread that spawned it ends.
            bookie.spawn(*(("--config", str(self.config_path)) if self.config_path else ()))
            await bookie.wait_started_async()
            return await self._adds(bookie.host, bookie.port, load)
        finally:
            if bookie.proc is not None:
                pid = bookie.proc.pid
                with trio.CancelScope(shield=True):
                    stopped = await trio.to_thread.run_sync(_stop, bookie)
                interrupt.closed(f"the bookie it started (pid {pid}) {stopped}")

    async def _adds(self, host: str, port: int, load: Load) -> BenchResult:
        return await bench_bookie(
            host, port, entry_size=load.entry_size, count=load.count, window=load.window, ledger_id=self.ledger_id
        )


def _stop(bookie: BookieProcess) -> str:
    """Stop bench's own bookie, bounded; how it ended, for the line an interrupted bench prints."""
    try:
        bookie.stop(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"killed (it did not stop within {STOP_TIMEOUT_S:g} s of SIGTERM)"
    return "stopped"


@attrs.frozen
class ThroughClient:
    """Client mode: appends through the client library to a new ledger on the cluster of
    ``metadata``; ``settings`` are the ``open_client`` keywords of TLS and the token."""

    metadata: str
    ensemble: int
    write_quorum: int
    ack_quorum: int
    ledger_type: str
    sync_every: int
    settings: dict[str, Any]

    def run(self, load: Load) -> BenchResult:
        return interrupt.run(lambda: self._appends(load))

    async def _appends(self, load: Load) -> BenchResult:
        from bkframe.client.client import open_client

        async with open_client(self.metadata, **self.settings) as client:
            with interrupt.work():  # a signal stops the appends, not the client: the ledger is closed
                result, _ = await append_timed(
                    client, entry_size=load.entry_size, count=load.count, window=load.window, ensemble=self.ensemble,
                    write_quorum=self.write_quorum, ack_quorum=self.ack_quorum, ledger_type=self.ledger_type,
                    progress=load.count >= 50_000 and sys.stderr.isatty(), sync_every=self.sync_every,
                )
                return result
        return cast(BenchResult, None)  # stopped by a signal: interrupt.run exits


@attrs.frozen
class AppendsOptions:
    """The options of ``bkframe bench appends``, grouped: the load, and where it goes."""

    load: Load
    target: OneBookie | ThroughClient
    as_json: bool

    @classmethod
    def parse(cls, options: dict[str, Any]) -> AppendsOptions:
        """The one place the command's options become a value (quorums and security checked)."""
        o = options
        load = Load(entry_size=o["entry_size"], count=o["count"], window=o["window"])
        target: OneBookie | ThroughClient
        if o["metadata"]:
            check_quorums(o["ensemble"], o["write_quorum"], o["ack_quorum"])
            target = ThroughClient(
                metadata=o["metadata"], ensemble=o["ensemble"], write_quorum=o["write_quorum"],
                ack_quorum=o["ack_quorum"], ledger_type=o["ledger_type"], sync_every=o["sync_every"],
                settings=client_security(
                    tls_ca=o["tls_ca"], tls_cert=o["tls_cert"], tls_key=o["tls_key"], auth_token_file=o["auth_token_file"]
                ),
            )
        else:
            target = OneBookie(
                address=o["address"], data_dir=o["data_dir"], config_path=o["config_path"], ledger_id=o["ledger_id"]
            )
        return cls(load=load, target=target, as_json=o["as_json"])


@click.command(name="appends")
@click.option(
    "--bookie", "address",
    help="HOST:PORT of a running bookie without a metadata store (bookie mode writes raw adds, which a bookie with a "
    "store takes only for ledgers its store knows). Default: start one in a subprocess.",
)
@click.option("--data-dir", type=click.Path(path_type=Path), help="Data dir of the bookie started for the run.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Config of the bookie started for the run.")
@click.option("--entry-size", type=BYTES, default=1024, show_default=True)
@click.option("--count", type=AT_LEAST_ONE, default=100_000, show_default=True)
@click.option("--window", type=AT_LEAST_ONE, default=256, show_default=True, help="Adds in flight at most.")
@click.option("--ledger", "ledger_id", type=int, default=1, show_default=True, help="Ledger id (bookie mode).")
@click.option("--metadata", help="Client mode: append through the client library on this cluster.")
@click.option("-e", "--ensemble", type=int, default=3, show_default=True, help="Client mode.")
@click.option("-w", "--write-quorum", type=int, default=3, show_default=True, help="Client mode.")
@click.option("-a", "--ack-quorum", type=int, default=2, show_default=True, help="Client mode.")
@click.option("--type", "ledger_type", default="PD_JOURNAL", show_default=True, help="Client mode: ledger type.")
@click.option("--sync-every", type=int, default=0, help="Client mode: call sync() after every N appends.")
@click.option("--tls-ca", help="Client mode: CA of the bookies' certificates (or $BKFRAME_TLS_CA).")
@click.option("--tls-cert", help="Client mode: client certificate, for require_client_cert (or $BKFRAME_TLS_CERT).")
@click.option("--tls-key", help="Client mode: the client certificate's key (or $BKFRAME_TLS_KEY).")
@click.option(
    "--auth-token-file", type=click.Path(path_type=Path),
    help="Client mode: file holding the token, for token auth (or $BKFRAME_AUTH_TOKEN_FILE, or $BKFRAME_AUTH_TOKEN).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line instead of text.")
def appends(**options: Any) -> None:
    """Benchmark pipelined adds: against one bookie directly (default, no metadata store
    needed), or through the client library on a cluster (--metadata)."""
    run = AppendsOptions.parse(options)
    result = run.target.run(run.load)
    click.echo(json.dumps(attrs.asdict(result)) if run.as_json else result.human())
