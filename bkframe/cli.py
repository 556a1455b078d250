"""The ``bkframe`` command line."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import click
import trio

from bkframe.cli_errors import find_error
from bkframe.core.config import ConfigError, load_config
from bkframe.core.cookies import CookieError
from bkframe.core.disk_space import NoSpaceToStartError
from bkframe.core.interfaces import JournalCorruptError
from bkframe.core.metadata import MetadataError
from bkframe.core.plugin_manager import PluginManager

if TYPE_CHECKING:
    from bkframe.core.bookie_service import BookieService


@click.group()
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """bkframe: a replicated, durable log store in the model of Apache BookKeeper."""
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Bookie TOML config (see conf/bookie.toml).")
@click.option("--data-dir", type=click.Path(path_type=Path), help="Overrides [bookie] data_dir.")
@click.option("--host", help="Overrides [bookie] host.")
@click.option("--port", type=int, help="Overrides [bookie] port (0 picks a free port).")
@click.option("--metadata", help="Overrides [bookie] metadata (metadata store URI).")
@click.option("--bookie-id", help="Overrides [bookie] bookie_id (default HOST:PORT).")
def bookie(
    config_path: Path | None,
    data_dir: Path | None,
    host: str | None,
    port: int | None,
    metadata: str | None,
    bookie_id: str | None,
) -> None:
    """Run one bookie composed from the config file."""
    from bkframe.core.bookie_service import BookieService
    from bkframe.testing.powerloss import install_from_env

    install_from_env()  # only with BKFRAME_POWERLOSS_* set: the tests' power-cut simulation
    from bkframe.testing import write_faults

    write_faults.install_from_env()  # only with BKFRAME_WRITE_FAULTS set: the tests' injected write failures
    from bkframe.testing import diskfull

    diskfull.install_from_env()  # only with BKFRAME_DISKFULL_* set: the tests' full-disk simulation

    try:
        config = load_config(config_path, {"data_dir": data_dir, "host": host, "port": port, "metadata": metadata, "bookie_id": bookie_id})
        service = BookieService(config, PluginManager())
    except (ConfigError, MetadataError) as e:
        raise click.ClickException(f"bad config: {e}") from None

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                host_port = await nursery.start(service.run)
                click.echo(f"listening on {host_port[0]}:{host_port[1]}")
                sys.stdout.flush()
                nursery.start_soon(_stop_on_signal, signals, service)

    try:
        trio.run(run)
    except BaseException as e:
        known = find_error(e, (ConfigError, JournalCorruptError, MetadataError, CookieError, NoSpaceToStartError))
        if known is None:
            raise
        raise click.ClickException(str(known)) from None


async def _stop_on_signal(signals: AsyncIterator[int], service: BookieService) -> None:
    async for signum in signals:
        logging.getLogger("bkframe").info("received %s; draining and stopping", signal.Signals(signum).name)
        service.stop()
        return


@main.command()
def plugins() -> None:
    """List every loaded plugin, its distribution and the hooks it implements."""
    pm = PluginManager()
    for info in pm.plugins():
        click.echo(f"{info.name}  [{info.distribution}]")
        for hook in info.hooks:
            click.echo(f"    {hook}")
    click.echo("ledger types:")
    for name, policy in sorted(pm.ledger_types().items()):
        click.echo(f"    {name} (wire id {policy.type_id}): {policy.description}")


from bkframe.bench import bench  # noqa: E402  (subcommands in their own modules)
from bkframe.bookies_cli import bookies  # noqa: E402
from bkframe.cookie_cli import cookie  # noqa: E402
from bkframe.ledger_cli import ledger  # noqa: E402
from bkframe.log_cli import log_group  # noqa: E402
from bkframe.sandbox import sandbox  # noqa: E402

main.add_command(bench)
main.add_command(bookies)
main.add_command(cookie)
main.add_command(ledger)
main.add_command(log_group)
main.add_command(sandbox)
