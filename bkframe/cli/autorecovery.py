"""``bkframe autorecovery``: run the auditor candidate and a replication worker alone
(``run``, the default), or show what autorecovery is doing (``status``).
See docs/autorecovery.md."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click
import trio

from bkframe.autorecovery.service import STATUS_MARKS, AutorecoveryService, cluster_status
from bkframe.cli import interrupt
from bkframe.cli.interrupt import run_until_signal
from bkframe.cli.options import auth_token_option, metadata_option
from bkframe.cli.standalone import standalone, standalone_options
from bkframe.client.settings import ClientSettings
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.plugin_manager import PluginManager

log = logging.getLogger("bkframe.autorecovery")


@click.group(invoke_without_command=True)
@click.pass_context
@standalone_options(
    "autorecovery",
    "its [autorecovery] keys (enabled is ignored: running alone is enabling it), "
    "[placement] (where copies go) and [offload] (with enabled = true, the offload service runs too).",
)
@auth_token_option
def autorecovery(ctx: click.Context, metadata: str | None, config_path: Path | None, holder: str) -> None:
    """Run autorecovery alone (an auditor candidate and a replication worker) until
    SIGTERM / SIGINT; 'bkframe autorecovery status' shows what it is doing."""
    if ctx.invoked_subcommand is not None:
        return
    alone = standalone(ctx, "autorecovery", metadata, config_path, holder)
    config = alone.config

    async def serve(store: MetadataStore, settings: ClientSettings) -> None:
        service = AutorecoveryService(
            store, alone.plugins, config.autorecovery, holder=alone.holder, settings=settings, offload=config.offload
        )
        await run_until_signal(service.run, f"autorecovery running as {alone.holder}", log)

    trio.run(alone.run, serve)


@autorecovery.command()
@metadata_option()
@click.option("--from", "start", type=click.IntRange(min=0), default=0, help="Show under-replicated ledgers from this id.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=STATUS_MARKS, show_default=True,
    help="Under-replicated ledgers shown (the count is of all of them).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def status(metadata: str, start: int, limit: int, as_json: bool) -> None:
    """The auditor, the under-replicated ledgers (how many; a page of them with their age,
    lost bookies and the worker on each) and the decommissioned bookies with how many
    ledgers still use them."""

    async def run() -> dict[str, Any]:
        store = PluginManager().metadata_store(metadata)
        try:
            return await cluster_status(store, start=start, limit=limit)
        finally:
            await store.aclose()

    got = interrupt.run(run)
    if as_json:
        click.echo(json.dumps(got, sort_keys=True))
        return
    where = f" at {got['auditor_address']}" if got.get("auditor_address") else ""
    click.echo(f"auditor: {got['auditor'] or '(none)'}{where}")
    marks = got["under_replicated"]
    count = got["under_replicated_count"]
    shown = ""
    if marks and len(marks) < count:
        shown = f" ({len(marks)} shown, ledgers {marks[0]['ledger_id']} to {marks[-1]['ledger_id']})"
    click.echo(f"under-replicated ledgers: {count}{shown}")
    for m in marks:
        worker = f", replicated by {m['worker']}" if m["worker"] else ""
        click.echo(f"  ledger {m['ledger_id']}: lost {', '.join(m['lost_bookies'])}; marked {m['age_s']:.0f} s ago{worker}")
    if got["under_replicated_next"] is not None:
        click.echo(f"  more: --from {got['under_replicated_next']}")
    for d in got["decommissioned"]:
        click.echo(f"decommissioned: {d['bookie_id']} ({d['ledgers']} ledger(s) still use it)")
