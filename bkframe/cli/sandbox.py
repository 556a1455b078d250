"""``bkframe sandbox``: a local cluster of bookie processes on one metadata store."""

from __future__ import annotations

import json
import os
import signal
import time
from functools import partial
from pathlib import Path
from typing import Any

import click
import trio

from bkframe.cli.options import metadata_option
from bkframe.core.client.client import open_client
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import MetadataError
from bkframe.testing.cluster import BOOKIE_COMMAND, Cluster

#: How long the sandbox waits for its metadata store to answer before giving up.
STORE_CHECK_TIMEOUT_S = 15.0


async def check_store(metadata: str) -> None:
    """Open (creating it if new) the metadata store and ask it something, so that a store
    that is down or misspelt is one clear error before any bookie starts."""
    store = PluginManager().metadata_store(metadata, create=True)
    try:
        with trio.fail_after(STORE_CHECK_TIMEOUT_S):
            await store.list_bookies()
    except trio.TooSlowError:
        raise MetadataError(
            f"metadata store {metadata} did not answer within {STORE_CHECK_TIMEOUT_S:.0f} s; is it running?"
        ) from None
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


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
@metadata_option(required=False, help="Metadata URI. Default: sqlite:///DATA_DIR/metadata.db (embedded).")
@click.option("--demo", is_flag=True, help="Write and read a ledger, print what was done, then stop.")
def sandbox(bookies: int, data_dir: Path, metadata: str | None, demo: bool) -> None:
    """Run a local cluster: N bookie processes on one metadata store."""
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    metadata = metadata or f"sqlite://{data_dir / 'metadata.db'}"
    cluster = Cluster(data_dir, bookies, metadata, first=1, command=BOOKIE_COMMAND)

    async def main() -> None:
        await check_store(metadata)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            try:
                await trio.to_thread.run_sync(partial(cluster.start, parallel=True))
                state = {
                    "metadata": metadata,
                    "bookies": [
                        {"id": b.bookie_id, "address": b.address, "pid": b.proc.pid if b.proc else 0, "log": str(b.log_path)}
                        for b in cluster.bookies
                    ],
                }
                (data_dir / "sandbox.json").write_text(json.dumps(state, indent=2) + "\n")
                click.echo(f"sandbox: {bookies} bookies on {metadata}")
                for b in cluster.bookies:
                    click.echo(f"  {b.bookie_id} at {b.address} (log: {b.log_path})")
                click.echo(f"wrote {data_dir / 'sandbox.json'}")
                if demo:
                    await run_demo(metadata, bookies, click.echo)
                else:
                    click.echo("running; Ctrl-C (SIGINT) or SIGTERM stops the cluster")
                    async for _ in signals:
                        break
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(partial(cluster.stop, timeout_s=30.0))
                click.echo("sandbox stopped")

    trio.run(main)
