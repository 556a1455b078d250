"""``bkframe offloader``: run the offload service alone (docs/tiered-storage.md, "The
offload service"): logs' closed segments moved to their tier by their settings, and their
ledgers deleted from the bookies after the deletion lag -- and logs compacted by key when
their dirty part is due (docs/compaction.md; ``[offload] compaction``) -- until SIGTERM /
SIGINT, or one pass with ``--once``."""

from __future__ import annotations

import logging
from pathlib import Path

import click
import trio
from prometheus_client import start_http_server

from bkframe.cli.interrupt import run_until_signal
from bkframe.cli.options import auth_token_option
from bkframe.cli.standalone import standalone, standalone_options
from bkframe.client.settings import ClientSettings
from bkframe.compaction.service import CompactionCounters, CompactionService
from bkframe.compaction.service import register as register_compaction
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.tiering.offload_metrics import OffloadCounters, offload_registry
from bkframe.tiering.offload_service import OffloadService

log = logging.getLogger("bkframe.offload")


@click.command()
@standalone_options(
    "offloader",
    "its [offload] keys (the default tier, after, beyond and deletion lag of logs that "
    "set none; the period, timeouts, back-off) and [placement]. enabled is ignored: running it is enabling it.",
)
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
    alone = standalone(ctx, "offloader", metadata, config_path, holder)
    counters = OffloadCounters()
    compactions = CompactionCounters()
    compacting = alone.config.offload.compaction
    if metrics_port is not None:
        registry = offload_registry(counters)
        register_compaction(compactions, registry)
        server, _ = start_http_server(metrics_port, addr=metrics_host, registry=registry)
        click.echo(f"metrics at http://{metrics_host}:{server.server_port}/metrics", err=True)

    async def serve(store: MetadataStore, settings: ClientSettings) -> None:
        config = alone.config.offload
        service = OffloadService(store, alone.plugins, config, holder=alone.holder, settings=settings, counters=counters)
        compactor = CompactionService(
            store, alone.plugins, config, holder=alone.holder, settings=settings, counters=compactions
        )
        if once:
            await service.run_once()
            if compacting:
                await compactor.run_once()
            return

        async def both(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                if compacting:
                    await nursery.start(compactor.run)
                task_status.started()

        await run_until_signal(both, f"offloader running as {alone.holder}", log)

    trio.run(alone.run, serve)
    if once:
        c = counters
        failing = f"; failing tiers: {', '.join(sorted(c.failures))}" if c.failures else ""
        click.echo(
            f"offloaded {sum(c.segments.values())} segment(s) ({sum(c.object_bytes.values())} bytes); "
            f"deleted {c.ledgers_deleted} ledger(s) past the deletion lag{failing}"
        )
        if compacting:
            k = compactions
            click.echo(
                f"compacted {k.runs['done']} log(s): dropped {k.records_dropped} of {k.records_read} record(s) "
                f"({k.bytes_dropped} bytes)" + (f"; {k.runs['failed']} failed" if k.runs["failed"] else "")
            )
