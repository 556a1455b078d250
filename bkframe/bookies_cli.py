"""``bkframe bookies list``: the bookies registered in a metadata store."""

from __future__ import annotations

import json

import click
import trio

from bkframe.core.metadata import BookieInfo, MetadataError
from bkframe.core.plugin_manager import PluginManager


@click.group()
def bookies() -> None:
    """Inspect the cluster's bookies."""


@bookies.command(name="list")
@click.option("--metadata", envvar="BKFRAME_METADATA", required=True, help="Metadata store URI (or $BKFRAME_METADATA).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per bookie.")
def list_bookies(metadata: str, as_json: bool) -> None:
    """Registered, live bookies with their address and state."""

    async def run() -> list[BookieInfo]:
        store = PluginManager().metadata_store(metadata)
        try:
            return await store.list_bookies()
        finally:
            await store.aclose()

    try:
        infos = trio.run(run)
    except MetadataError as e:
        raise click.ClickException(str(e)) from None
    for b in infos:
        state = "read-only" if b.read_only else "writable"
        click.echo(json.dumps({"id": b.bookie_id, "address": b.address, "state": state}) if as_json
                   else f"{b.bookie_id}\t{b.address}\t{state}")
