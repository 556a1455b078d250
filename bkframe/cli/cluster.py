"""``bkframe cluster init|info``: make a metadata store a bkframe cluster (BookKeeper's
``initnewcluster``), and show what it holds. See :mod:`bkframe.common.cluster_record`."""

from __future__ import annotations

import datetime
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
import trio

from bkframe.cli import interrupt
from bkframe.cli.options import metadata_option
from bkframe.common.cluster_record import init_cluster, require_cluster
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import ClusterRecord
from bkframe.core.plugin_manager import PluginManager

T = TypeVar("T")


@click.group()
def cluster() -> None:
    """The cluster record of a metadata store: a cluster is created on purpose, once."""


def _run(metadata: str, fn: Callable[[MetadataStore], Awaitable[T]], *, create: bool = False) -> T:
    async def main() -> T:
        store = PluginManager().metadata_store(metadata, create=create)
        try:
            return await fn(store)
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()

    return interrupt.run(main)


@cluster.command()
@metadata_option()
def init(metadata: str) -> None:
    """Make the metadata store a new bkframe cluster, unless it is one (then nothing changes).
    Run it once, before the first bookie starts (or start a bookie with --init-cluster)."""
    record, created = _run(metadata, init_cluster, create=True)
    what = "created" if created else "already exists"
    click.echo(f"cluster {record.instance_id} {what} in {metadata} (layout version {record.layout_version})")


@cluster.command()
@metadata_option()
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def info(metadata: str, as_json: bool) -> None:
    """The cluster record: instance id, layout version, creation time (never the secret)."""
    record: ClusterRecord = _run(metadata, require_cluster)
    shown = record.describe()
    if as_json:
        click.echo(json.dumps(shown, sort_keys=True))
        return
    created = datetime.datetime.fromtimestamp(record.created_at, datetime.UTC).isoformat(timespec="seconds")
    click.echo(f"instance id:    {record.instance_id}")
    click.echo(f"layout version: {record.layout_version}")
    click.echo(f"created at:     {created}")
