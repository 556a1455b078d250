"""``bkframe sandbox``: a local cluster of bookie processes on one metadata store."""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from pathlib import Path

import click
import trio

from bkframe.cli import interrupt
from bkframe.cli.demo import run_demo, run_spark_pipeline, spark_missing
from bkframe.cli.options import AT_LEAST_ONE, EnvOption, metadata_option
from bkframe.common.cluster_record import init_cluster
from bkframe.core.metadata import ClusterRecord
from bkframe.core.plugin_manager import PluginManager
from bkframe.launcher import Cluster
from bkframe.storage_kit.directory_lock import DirectoryLockedError, DirectoryLocks

#: In the sandbox's data dir: its metadata URI and its bookies, written once they are up.
STATE_FILE = "sandbox.json"


async def check_store(metadata: str) -> ClusterRecord:
    """Open (creating it if new) the metadata store and make it a cluster unless it is one
    (as ``bkframe cluster init``), so that a store that is down or misspelt is one clear
    error before any bookie starts."""
    store = PluginManager().metadata_store(metadata, create=True)
    try:
        record, _ = await init_cluster(store)
        return record
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


@click.command()
@click.option("--bookies", type=AT_LEAST_ONE, default=3, show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("sandbox-data"), show_default=True)
@metadata_option(required=False, help="Metadata URI. Default: sqlite:///DATA_DIR/metadata.db (embedded).")
@click.option(
    "--demo", is_flag=True,
    help="Write and read ledgers and a named log, run a Spark pipeline on logs, print what was done, then stop.",
)
@click.option("--no-spark", is_flag=True, help="With --demo: skip the Spark pipeline (it needs pyspark and Java).")
@click.option(
    "--racks", default="", metavar="R1,R2,...",
    help="Rack labels given to the bookies in turn (bookie i gets the i-th, cycling), for rack-aware placement.",
)
@click.option(
    "--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    cls=EnvOption,
    envvar="BKFRAME_SANDBOX_CONFIG",
    help="Bookie TOML config for every bookie (see conf/bookie.toml); also $BKFRAME_SANDBOX_CONFIG.",
)
def sandbox(
    bookies: int,
    data_dir: Path,
    metadata: str | None,
    demo: bool,
    no_spark: bool,
    racks: str,
    config_path: Path | None,
) -> None:
    """Run a local cluster: N bookie processes on one metadata store."""
    if demo and not no_spark and (missing := spark_missing()) is not None:
        raise click.ClickException(missing)  # before any bookie starts: nothing to undo
    data_dir = data_dir.resolve()
    # Before anything is read or written there (the store, sandbox.json, the bookies' dirs):
    # one sandbox per directory, held until this process ends.
    try:
        locks = DirectoryLocks.acquire([data_dir], user="sandbox")
    except DirectoryLockedError as e:
        raise click.ClickException(_already_running(data_dir, e.pid)) from None
    with locks:
        _run(data_dir, bookies, metadata, demo=demo, no_spark=no_spark, racks=racks, config_path=config_path)


def _run(
    data_dir: Path, bookies: int, metadata: str | None, *, demo: bool, no_spark: bool, racks: str, config_path: Path | None
) -> None:
    """The sandbox itself, in its locked data dir: until a signal, or the demo's end."""
    (data_dir / STATE_FILE).unlink(missing_ok=True)  # an earlier run's: this one writes its own once up
    metadata = metadata or f"sqlite://{data_dir / 'metadata.db'}"
    rack_labels = [r.strip() for r in racks.split(",") if r.strip()]
    args = ("--http-port", "0", *(("--config", str(config_path.resolve())) if config_path is not None else ()))
    # check_store makes the cluster (once, before any bookie starts): the bookies need no --init-cluster.
    cluster = Cluster(data_dir, bookies, metadata, bookie_args=args, first=1, racks=rack_labels, init_cluster=False)

    async def main() -> None:
        await check_store(metadata)
        # Until SIGINT or SIGTERM (bkframe.cli.interrupt cancels it), or the demo's end.
        try:
            await trio.to_thread.run_sync(partial(cluster.start, parallel=True))
            state = {
                "metadata": metadata,
                "pid": os.getpid(),
                "bookies": [
                    {"id": b.bookie_id, "address": b.address, "pid": b.proc.pid if b.proc else 0, "log": str(b.log_path),
                     "rack": b.rack, "http": b.http_url}
                    for b in cluster.bookies
                ],
            }
            (data_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
            click.echo(f"sandbox: {bookies} bookies on {metadata}")
            for b in cluster.bookies:
                rack = f", rack {b.rack}" if b.rack else ""
                click.echo(f"  {b.bookie_id} at {b.address}{rack} (log: {b.log_path}), admin http {b.http_url}")
            click.echo(f"status page: {cluster.bookies[0].http_url}/")
            click.echo(f"wrote {data_dir / STATE_FILE}")
            if demo:
                await run_demo(metadata, bookies, click.echo, tier_dir=data_dir / "tier")
                if not no_spark:
                    await run_spark_pipeline(metadata, data_dir, click.echo)
            else:
                click.echo("running; Ctrl-C (SIGINT) or SIGTERM stops the cluster")
                sys.stdout.flush()
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(partial(cluster.stop, timeout_s=30.0))
            if interrupt.interrupted():
                interrupt.closed(f"sandbox stopped ({len(cluster.bookies)} bookies)")
            else:
                click.echo("sandbox stopped")

    interrupt.run(main)


def _already_running(data_dir: Path, pid: int | None) -> str:
    """How to reach the sandbox that holds ``data_dir``, in one line."""
    who = f"pid {pid}" if pid is not None else "another process"
    state = data_dir / STATE_FILE
    try:
        metadata = json.loads(state.read_text())["metadata"]
    except (OSError, ValueError, KeyError, TypeError):
        reach = f"it is still starting: {state} will name its metadata store and bookies"
    else:
        reach = f"reach it with --metadata {metadata} (or BKFRAME_METADATA={metadata}); its bookies are in {state}"
    return (
        f"a sandbox is already running on {data_dir} ({who}); {reach}. Stop it (Ctrl-C in its shell, or "
        f"kill {pid if pid is not None else 'it'}) before starting another there, or give this one another --data-dir"
    )
