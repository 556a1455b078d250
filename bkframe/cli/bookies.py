"""``bkframe bookies list`` / ``info``: the bookies registered in a metadata store;
``bookies decommission``: move everything off a bookie (autorecovery)."""

from __future__ import annotations

import json

import click

from bkframe.cli import interrupt
from bkframe.cli.metadata_only import on_metadata_store
from bkframe.cli.options import auth_token_option, client_security, metadata_option
from bkframe.core.plugin_manager import PluginManager


@click.group()
def bookies() -> None:
    """Inspect the cluster's bookies."""


@bookies.command(name="list")
@metadata_option()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per bookie.")
def list_bookies(metadata: str, as_json: bool) -> None:
    """Registered, live bookies with their address, state and rack: writable, or read-only
    (its disk is full: it takes no adds, serves reads; see 'bkframe bookies info' for why). The
    rack is a fourth column once any bookie has a rack label ('-' for those without)."""

    infos = on_metadata_store(metadata, lambda store: store.list_bookies())  # the store alone: no trio, no client
    racks = any(b.rack for b in infos)
    for b in infos:
        state = "read-only" if b.read_only else "writable"
        rack = f"\t{b.rack or '-'}" if racks else ""
        click.echo(json.dumps({"id": b.bookie_id, "address": b.address, "state": state, "rack": b.rack}) if as_json
                   else f"{b.bookie_id}\t{b.address}\t{state}{rack}")


@bookies.command(name="info")
@click.argument("bookie_ids", nargs=-1)
@metadata_option()
@auth_token_option
def bookie_info(bookie_ids: tuple[str, ...], metadata: str) -> None:
    """GET_BOOKIE_INFO of the given bookies (default: every registered one), one JSON line
    each: counters, last_shutdown_clean, cookie_check, limbo_ledgers, repair progress, and
    read_only / read_only_reason / disk_usage (read-only mode on a full disk)."""
    from bkframe.client.bookies.connection import connect_bookie
    from bkframe.client.bookies.errors import BookieConnectionError
    from bkframe.client.settings import ClientSettings

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

    infos = interrupt.run(run)
    for info in infos:
        click.echo(json.dumps(info, sort_keys=True))
    if any("error" in info for info in infos):
        raise SystemExit(1)


@bookies.command(name="decommission")
@click.argument("bookie_id")
@metadata_option()
@click.option("--no-wait", is_flag=True, help="Mark it and return; do not wait for its ledgers to move.")
@click.option("--undo", is_flag=True, help="Take the mark back: the bookie takes new ledgers and adds again.")
@click.option("--interval", type=float, default=2.0, show_default=True, help="Seconds between progress lines.")
def decommission(bookie_id: str, metadata: str, no_wait: bool, undo: bool, interval: float) -> None:
    """Mark a bookie decommissioned: nothing new is placed on it, it refuses adds (writers
    move off it), and autorecovery copies its ledgers to other bookies. Waits, printing
    progress, until no ledger has a fragment on it; then the bookie can be stopped."""
    import trio

    from bkframe.autorecovery.service import ledgers_using

    async def run() -> None:
        store = PluginManager().metadata_store(metadata)
        try:
            await store.set_decommissioned(bookie_id, not undo)
            if undo:
                click.echo(f"{bookie_id} is no longer decommissioned")
                return
            click.echo(f"{bookie_id} is decommissioned; autorecovery copies its ledgers away")
            last = -1
            while not no_wait:
                using = await ledgers_using(store, bookie_id)
                if len(using) != last:
                    shown = ", ".join(map(str, using[:10])) + (" ..." if len(using) > 10 else "")
                    click.echo(f"{len(using)} ledger(s) still use {bookie_id}" + (f": {shown}" if using else ""))
                    last = len(using)
                if not using:
                    click.echo(f"nothing depends on {bookie_id} any more; it can be stopped")
                    return
                await trio.sleep(interval)
        finally:
            await store.aclose()

    interrupt.run(run)
