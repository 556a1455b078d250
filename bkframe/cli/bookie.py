"""``bkframe bookie``: run one bookie composed from its config file."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import click
import trio

from bkframe.cli.options import metadata_option
from bkframe.core.bookie.service import BookieService
from bkframe.core.config import load_config
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.replication.autorecovery import in_bookie
from bkframe.core.replication.data_integrity import LimboRepair


@click.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Bookie TOML config (see conf/bookie.toml).")
@click.option("--data-dir", type=click.Path(path_type=Path), help="Overrides [bookie] data_dir.")
@click.option("--host", help="Overrides [bookie] host.")
@click.option("--port", type=int, help="Overrides [bookie] port (0 picks a free port).")
@metadata_option(required=False, help="Overrides [bookie] metadata (metadata store URI).")
@click.option("--bookie-id", help="Overrides [bookie] bookie_id (default HOST:PORT).")
@click.option("--rack", help="Overrides [bookie] rack (its rack label, for rack-aware placement).")
def bookie(
    config_path: Path | None,
    data_dir: Path | None,
    host: str | None,
    port: int | None,
    metadata: str | None,
    bookie_id: str | None,
    rack: str | None,
) -> None:
    """Run one bookie composed from the config file; prints 'listening on HOST:PORT'."""
    overrides = {"data_dir": data_dir, "host": host, "port": port, "metadata": metadata, "bookie_id": bookie_id, "rack": rack}
    config = load_config(config_path, overrides)
    plugins = PluginManager(disabled=config.plugins.disable)
    plugins.check_config(config)  # every section's mistakes before anything starts
    service = BookieService(config, plugins, repair=LimboRepair, autorecovery=in_bookie)

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                host_port = await nursery.start(service.run)
                click.echo(f"listening on {host_port[0]}:{host_port[1]}")
                sys.stdout.flush()
                nursery.start_soon(_stop_on_signal, signals, service)

    trio.run(run)


async def _stop_on_signal(signals: AsyncIterator[int], service: BookieService) -> None:
    async for signum in signals:
        logging.getLogger("bkframe").info("received %s; draining and stopping", signal.Signals(signum).name)
        service.stop()
        return
