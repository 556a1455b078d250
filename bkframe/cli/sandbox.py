"""``bkframe sandbox``: a local cluster of bookie processes on one metadata store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import click
import trio

from bkframe.core.client.client import open_client


@attrs.define
class SandboxBookie:
    bookie_id: str
    data_dir: Path
    process: trio.Process | None = None
    address: str = ""


async def _read_line(process: trio.Process) -> str:
    assert process.stdout is not None
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = await process.stdout.receive_some(1)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace").strip()


async def start_bookie(b: SandboxBookie, metadata: str, extra: tuple[str, ...] = ()) -> None:
    """Start one bookie process and wait for its ``listening on`` line."""
    cmd = [
        sys.executable, "-m", "bkframe", "bookie",
        "--data-dir", str(b.data_dir), "--port", "0", "--metadata", metadata, "--bookie-id", b.bookie_id, *extra,
    ]
    b.process = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE)
    with trio.fail_after(60):
        line = await _read_line(b.process)
    if not line.startswith("listening on "):
        raise click.ClickException(f"bookie {b.bookie_id} did not start (exit {await b.process.wait()}); see its stderr")
    b.address = line.split()[-1]


async def stop_bookie(b: SandboxBookie) -> None:
    if b.process is None or b.process.returncode is not None:
        return
    b.process.send_signal(signal.SIGTERM)
    with trio.move_on_after(30):
        await b.process.wait()
    if b.process.returncode is None:
        b.process.kill()
        await b.process.wait()


async def run_demo(metadata: str, bookies: int, out: Any) -> dict[str, Any]:
    """Write a ledger of each built-in write-path type, read it back, verify, report."""
    e = min(3, bookies)
    a = max(1, min(2, e))
    count, size = 20_000, 1024
    payloads = [(b"%08d" % i) + os.urandom(size - 8) for i in range(count)]
    report: dict[str, Any] = {}
    async with open_client(metadata) as client:
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
            out(f"  wrote {count} entries of {size} B in {write_s:.2f} s: {count / write_s:,.0f} entries/s, "
                f"{count * size / write_s / 1e6:,.1f} MB/s; closed at entry {md.last_entry_id}")
            reader = await client.open_ledger(writer.ledger_id, password=b"demo")
            start = time.perf_counter()
            got = []
            for first in range(0, count, 1000):
                got.extend(await reader.read(first, min(first + 999, reader.lac)))
            read_s = time.perf_counter() - start
            ok = [entry.payload for entry in got] == payloads
            out(f"  read {len(got)} entries back in {read_s:.2f} s: {len(got) / read_s:,.0f} entries/s; "
                f"{'all match' if ok else 'MISMATCH'}")
            if not ok:
                raise click.ClickException(f"demo read back different entries than it wrote to {ledger_type} ledger")
            report[ledger_type] = {"ledger_id": writer.ledger_id, "entries": count, "write_s": write_s, "read_s": read_s}
    return report


@click.command()
@click.option("--bookies", type=int, default=3, show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("sandbox-data"), show_default=True)
@click.option("--metadata", help="Metadata URI. Default: sqlite:///DATA_DIR/metadata.db (embedded).")
@click.option("--demo", is_flag=True, help="Write and read a ledger, print what was done, then stop.")
def sandbox(bookies: int, data_dir: Path, metadata: str | None, demo: bool) -> None:
    """Run a local cluster: N bookie processes on one metadata store."""
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    metadata = metadata or f"sqlite://{data_dir / 'metadata.db'}"
    members = [SandboxBookie(f"bookie-{i}", data_dir / f"bookie-{i}") for i in range(1, bookies + 1)]

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            try:
                async with trio.open_nursery() as nursery:
                    for b in members:
                        nursery.start_soon(start_bookie, b, metadata)
                state = {
                    "metadata": metadata,
                    "bookies": [
                        {"id": b.bookie_id, "address": b.address, "pid": b.process.pid if b.process else 0}
                        for b in members
                    ],
                }
                (data_dir / "sandbox.json").write_text(json.dumps(state, indent=2) + "\n")
                click.echo(f"sandbox: {bookies} bookies on {metadata}")
                for b in members:
                    click.echo(f"  {b.bookie_id} at {b.address}")
                click.echo(f"wrote {data_dir / 'sandbox.json'}")
                if demo:
                    await run_demo(metadata, bookies, click.echo)
                else:
                    click.echo("running; Ctrl-C (SIGINT) or SIGTERM stops the cluster")
                    async for _ in signals:
                        break
            finally:
                with trio.CancelScope(shield=True):
                    async with trio.open_nursery() as nursery:
                        for b in members:
                            nursery.start_soon(stop_bookie, b)
                click.echo("sandbox stopped")

    trio.run(main)
