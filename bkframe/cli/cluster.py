"""``bkframe cluster init|info``: make a metadata store a bkframe cluster (BookKeeper's
``initnewcluster``), and show what it holds. See :mod:`bkframe.common.cluster_record`."""

from __future__ import annotations

import datetime
import json

import click

from bkframe.cli.metadata_only import on_metadata_store
from bkframe.cli.options import metadata_option
from bkframe.common.cluster_record import init_cluster, require_cluster
from bkframe.core.metadata import ClusterRecord


@click.group()
def cluster() -> None:
    """The cluster record of a metadata store: a cluster is created on purpose, once."""


@cluster.command()
@metadata_option()
def init(metadata: str) -> None:
    """Make the metadata store a new bkframe cluster, unless it is one (then nothing changes).
    Run it once, before the first bookie starts (or start a bookie with --init-cluster)."""
    record, created = on_metadata_store(metadata, init_cluster, create=True)
    what = "created" if created else "already exists"
    click.echo(f"cluster {record.instance_id} {what} in {metadata} (layout version {record.layout_version})")


@cluster.command()
@metadata_option()
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def info(metadata: str, as_json: bool) -> None:
    """The cluster record: instance id, layout version, creation time (never the secret)."""
    record: ClusterRecord = on_metadata_store(metadata, require_cluster)
    shown = record.describe()
    if as_json:
        click.echo(json.dumps(shown, sort_keys=True))
        return
    created = datetime.datetime.fromtimestamp(record.created_at, datetime.UTC).isoformat(timespec="seconds")
    click.echo(f"instance id:    {record.instance_id}")
    click.echo(f"layout version: {record.layout_version}")
    click.echo(f"created at:     {created}")
