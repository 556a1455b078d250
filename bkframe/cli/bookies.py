"""``bkframe bookies list``: the bookies registered in a metadata store."""

from __future__ import annotations

import json

import click
import trio

from bkframe.cli.options import client_security, metadata_option
from bkframe.core.client.settings import ClientSettings
from bkframe.core.metadata import BookieInfo
from bkframe.core.plugin_manager import PluginManager


@click.group()
def bookies() -> None:
    """Inspect the cluster's bookies."""


@bookies.command(name="list")
@metadata_option()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per bookie.")
def list_bookies(metadata: str, as_json: bool) -> None:
    """Registered, live bookies with their address, state and rack: writable, or read-only
    (its disk is full: it takes no adds, serves reads; see ``bookies info`` for why). The
    rack is a fourth column once any bookie has a rack label ('-' for those without)."""

    async def run() -> list[BookieInfo]:
        store = PluginManager().metadata_store(metadata)
        try:
            return await store.list_bookies()
        finally:
            await store.aclose()

    infos = trio.run(run)
    racks = any(b.rack for b in infos)
    for b in infos:
        state = "read-only" if b.read_only else "writable"
        rack = f"\t{b.rack or '-'}" if racks else ""
        click.echo(json.dumps({"id": b.bookie_id, "address": b.address, "state": state, "rack": b.rack}) if as_json
                   else f"{b.bookie_id}\t{b.address}\t{state}{rack}")


@bookies.command(name="info")
@click.argument("bookie_ids", nargs=-1)
@metadata_option()
def bookie_info(bookie_ids: tuple[str, ...], metadata: str) -> None:
    """GET_BOOKIE_INFO of the given bookies (default: every registered one), one JSON line
    each: counters, last_shutdown_clean, cookie_check, limbo_ledgers, repair progress, and
    read_only / read_only_reason / disk_usage (read-only mode on a full disk)."""
    from bkframe.core.client.bookie_client import BookieConnectionError, connect_bookie

    security = ClientSettings(**client_security())

    async def run() -> list[dict[str, object]]:
        store = PluginManager().metadata_store(metadata)
        try:
            registered = {b.bookie_id: b.address for b in await store.list_bookies()}
        finally:
            await store.aclose()
        wanted = list(bookie_ids) or sorted(registered)
        out: list[dict[str, object]] = []
        for bookie_id in wanted:
            address = registered.get(bookie_id)
            if address is None:
                out.append({"bookie_id": bookie_id, "error": "not registered (not running?)"})
                continue
            host, _, port = address.rpartition(":")
            try:
                async with connect_bookie(host, int(port), ssl_context=security.ssl_context(), auth=security.auth) as conn:
                    out.append(await conn.info())
            except BookieConnectionError as e:
                out.append({"bookie_id": bookie_id, "error": str(e)})
        return out

    infos = trio.run(run)
    for info in infos:
        click.echo(json.dumps(info, sort_keys=True))
    if any("error" in info for info in infos):
        raise SystemExit(1)
