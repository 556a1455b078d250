"""``bkframe sandbox``: a local cluster of bookie processes on one metadata store."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import click
import trio

from bkframe.bookie.startup.cookies import Cookie, cookie_conflict, read_local
from bkframe.cli import interrupt
from bkframe.cli.demo import run_demo, run_spark_pipeline, spark_missing
from bkframe.cli.errors import known_error, message
from bkframe.cli.options import AT_LEAST_ONE, EnvOption
from bkframe.common.cluster_record import init_cluster
from bkframe.common.environment import METADATA_ENV
from bkframe.core.metadata import ClusterRecord
from bkframe.core.plugin_manager import PluginManager
from bkframe.launcher import Cluster
from bkframe.storage_kit.directory_lock import DirectoryLockedError, DirectoryLocks

#: In the sandbox's data dir: its metadata URI and its bookies, written once they are up.
STATE_FILE = "sandbox.json"


async def check_store(metadata: str, bookie_dirs: Sequence[tuple[str, Path]] = ()) -> ClusterRecord:
    """Open (creating it if new) the metadata store and make it a cluster unless it is one
    (as ``bkframe cluster init``), so that a store that is down or misspelt is one clear
    error before any bookie starts; and refuse if the store knows a bookie of one of the
    ``bookie_dirs`` ids (id, data dir) that is not the one in that dir (another sandbox's or
    cluster's bookie-1): a bookie would refuse its cookie, and fixing that would take over
    the other bookie."""
    store = PluginManager().metadata_store(metadata, create=True)
    try:
        record, _ = await init_cluster(store)
        for bookie_id, data_dir in bookie_dirs:
            remote = await store.read_cookie(bookie_id)
            cookie = Cookie.deserialize(remote.value, f"the metadata store ({bookie_id})") if remote else None
            problem = cookie_conflict(read_local(data_dir), cookie, bookie_id)
            if problem is not None:
                raise click.ClickException(
                    f"the metadata store {metadata} knows another {bookie_id} than this sandbox's "
                    f"({data_dir}: {problem}); a sandbox runs its own bookies: leave out --metadata to run on the "
                    f"sandbox's own store, or give it a store that is no other cluster's"
                )
        return record
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


@click.command()
@click.option("--bookies", type=AT_LEAST_ONE, default=3, show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("sandbox-data"), show_default=True)
@click.option(
    "--metadata",
    default=None,
    help=f"The metadata store to run on; only this option names another than the sandbox's own (${METADATA_ENV} "
    "is not read). Default: sqlite:///DATA_DIR/metadata.db, embedded, made by the sandbox.",
)
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
    """Run a local cluster: N bookie processes on one metadata store.

    The store is the sandbox's own, in its data dir, unless --metadata names another: a
    sandbox never joins a store because the shell has $BKFRAME_METADATA set. Its first line
    says which store it uses."""
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
    own = f"sqlite://{data_dir / 'metadata.db'}"
    click.echo(f"sandbox: metadata store {metadata or own} ({_whose(metadata, own)})")
    metadata = metadata or own
    rack_labels = [r.strip() for r in racks.split(",") if r.strip()]
    args = ("--http-port", "0", *(("--config", str(config_path.resolve())) if config_path is not None else ()))
    # check_store makes the cluster (once, before any bookie starts): the bookies need no --init-cluster.
    cluster = Cluster(data_dir, bookies, metadata, bookie_args=args, first=1, racks=rack_labels, init_cluster=False)
    _check_bookies_belong(data_dir, metadata, own, [b.data_dir for b in cluster.bookies])
    (data_dir / STATE_FILE).unlink(missing_ok=True)  # an earlier run's: this one writes its own once up

    async def main() -> None:
        # On a store given with --metadata the bookies' ids may be another cluster's.
        await check_store(metadata, [(b.bookie_id, b.data_dir) for b in cluster.bookies] if metadata != own else ())
        # Until SIGINT or SIGTERM (bkframe.cli.interrupt cancels it), or the demo's end.
        try:
            await trio.to_thread.run_sync(partial(cluster.start, parallel=True))
            _announce(cluster, data_dir, metadata)
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
                n = len(cluster.bookies)
                interrupt.closed(f"sandbox stopped ({n} bookie{'s' if n != 1 else ''})")

    try:
        interrupt.run(main)
    except Exception as e:
        known = known_error(e)
        if known is None:  # a bug: the root group prints its traceback
            raise
        # The reason first, then what became of the sandbox (its bookies are stopped by now).
        sys.stdout.flush()
        click.ClickException(message(known)).show()
        click.echo("sandbox stopped", err=True)
        raise click.exceptions.Exit(1) from None
    click.echo("sandbox stopped")


def _announce(cluster: Cluster, data_dir: Path, metadata: str) -> None:
    """Write the running sandbox's state file and say where its bookies are."""
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
    n = len(cluster.bookies)
    click.echo(f"sandbox: {n} bookie{'s' if n != 1 else ''} on {metadata}")
    for b in cluster.bookies:
        rack = f", rack {b.rack}" if b.rack else ""
        click.echo(f"  {b.bookie_id} at {b.address}{rack} (log: {b.log_path}), admin http {b.http_url}")
    click.echo(f"status page: {cluster.bookies[0].http_url}/")
    click.echo(f"wrote {data_dir / STATE_FILE}")


def _whose(given: str | None, own: str) -> str:
    """Why the sandbox uses the store it does, for its first line."""
    if given is not None:
        return "given with --metadata" if given != own else "its own, given with --metadata"
    elsewhere = os.environ.get(METADATA_ENV)
    ignored = (
        f"; ${METADATA_ENV} ({elsewhere}) is not used: a sandbox joins another store only with --metadata"
        if elsewhere and elsewhere != own else ""
    )
    return f"its own{ignored}"


def _check_bookies_belong(data_dir: Path, metadata: str, own: str, bookie_dirs: list[Path]) -> None:
    """Refuse, before any bookie starts, to run the data dir's bookies on a store other than the
    one an earlier sandbox ran them on (its sandbox.json says which): a bookie belongs to one
    store, and the other store would refuse its cookie or take it in as its own."""
    try:
        before = json.loads((data_dir / STATE_FILE).read_text())["metadata"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # no earlier sandbox here (or it never came up): nothing to belong to
    if before == metadata or not any(d.exists() for d in bookie_dirs):
        return
    raise click.ClickException(
        f"the bookies in {data_dir} belong to the metadata store {before} (an earlier sandbox ran them there); "
        f"to run a sandbox on {metadata}, give it another --data-dir"
        + (" (or leave out --metadata: that store is this sandbox's own)" if before == own else "")
    )


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
