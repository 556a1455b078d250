"""``bkframe offloader``: run the offload service alone (docs/tiered-storage.md, "The
offload service"): logs' closed segments moved to their tier by their settings, and their
ledgers deleted from the bookies after the deletion lag, until SIGTERM / SIGINT -- or one
pass with ``--once``."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import attrs
import click
import trio
from prometheus_client import start_http_server

from bkframe.cli.interrupt import run_until_signal
from bkframe.cli.logging_setup import setup_logging
from bkframe.cli.options import LOG_OVERRIDES, auth_token_option, client_security, metadata_option, missing_option
from bkframe.client.settings import ClientSettings
from bkframe.common.cluster_record import require_cluster
from bkframe.core.config import load_config
from bkframe.core.plugin_manager import PluginManager
from bkframe.tiering.offload_metrics import OffloadCounters, offload_registry
from bkframe.tiering.offload_service import OffloadService

log = logging.getLogger("bkframe.offload")


@click.command()
@metadata_option(required=False)
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path),
    help="A bookie TOML config: its [offload] keys (the default tier, after, beyond and deletion lag of logs that "
    "set none; the period, timeouts, back-off) and [placement]. enabled is ignored: running it is enabling it.",
)
@click.option("--holder", default="", help="This service's name in the locks it takes (default offloader@HOST:PID).")
@click.option("--once", is_flag=True, help="Run one pass over the logs, then exit.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics at http://HOST:PORT/metrics (0: a free port, printed).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="The address the metrics port binds.")
@auth_token_option
@click.pass_context
def offloader(
    ctx: click.Context, metadata: str | None, config_path: Path | None, holder: str, once: bool,
    metrics_port: int | None, metrics_host: str,
) -> None:
    """Run the offload service: move logs' closed segments to their tiers by their settings
    and delete their ledgers after the deletion lag, until SIGTERM / SIGINT."""
    if not metadata:
        raise missing_option(ctx, "metadata")
    config = load_config(config_path)
    level, log_format = ctx.meta.get(LOG_OVERRIDES, (None, None))
    setup_logging(attrs.evolve(config.logging, format=log_format) if log_format else config.logging, level=level)
    plugins = PluginManager(disabled=config.plugins.disable)
    plugins.check_config(config)
    settings = ClientSettings.from_placement_section(config.placement, **client_security())
    name = holder or f"offloader@{socket.gethostname()}:{os.getpid()}"
    counters = OffloadCounters()
    if metrics_port is not None:
        server, _ = start_http_server(metrics_port, addr=metrics_host, registry=offload_registry(counters))
        click.echo(f"metrics at http://{metrics_host}:{server.server_port}/metrics", err=True)

    async def run() -> None:
        store = plugins.metadata_store(metadata)
        try:
            record = await require_cluster(store)
            # It reads ledgers without their passwords: it authenticates as the cluster's own.
            internal = settings.as_internal(record.secret)
            service = OffloadService(store, plugins, config.offload, holder=name, settings=internal, counters=counters)
            if once:
                await service.run_once()
                return
            await run_until_signal(service.run, f"offloader running as {name}", log)
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()

    trio.run(run)
    if once:
        c = counters
        failing = f"; failing tiers: {', '.join(sorted(c.failures))}" if c.failures else ""
        click.echo(
            f"offloaded {sum(c.segments.values())} segment(s) ({sum(c.object_bytes.values())} bytes); "
            f"deleted {c.ledgers_deleted} ledger(s) past the deletion lag{failing}"
        )

