"""``bkframe bookie``: run one bookie composed from its config file."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import click
import trio

from bkframe.autorecovery.data_integrity import LimboRepair
from bkframe.autorecovery.service import in_bookie
from bkframe.bookie.access import Access
from bkframe.bookie.bookie import Bookie
from bkframe.bookie.service import AdminHttp, BookieService, SubscriptionHost
from bkframe.cli.logging_setup import setup_logging
from bkframe.cli.options import LOG_OVERRIDES, metadata_option
from bkframe.client.settings import ClientSettings
from bkframe.core.config import Config, load_config
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.plugin_manager import PluginManager


@click.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Bookie TOML config (see conf/bookie.toml).")
@click.option("--data-dir", type=click.Path(path_type=Path), help="Overrides [bookie] data_dir.")
@click.option("--host", help="Overrides [bookie] host.")
@click.option("--port", type=int, help="Overrides [bookie] port (0 picks a free port).")
@metadata_option(required=False, help="Overrides [bookie] metadata (metadata store URI).")
@click.option(
    "--advertised-address",
    help="Overrides [bookie] advertised_address: HOST or HOST:PORT that clients and other bookies connect to "
    "(default: --host if specific, else this machine's hostname or primary address).",
)
@click.option(
    "--bookie-id", help="Overrides [bookie] bookie_id (default: the id in the data dir's cookie, else ADVERTISED_HOST:PORT)."
)
@click.option("--rack", help="Overrides [bookie] rack (its rack label, for rack-aware placement).")
@click.option(
    "--http-port", type=int, help="Turns the admin HTTP service on at this port (overrides [http]; 0 picks a free port)."
)
@click.option(
    "--init-cluster", is_flag=True,
    help="Make the metadata store a new bkframe cluster if it is none (as 'bkframe cluster init'); without it the "
    "bookie refuses to start on a store that holds no cluster.",
)
def bookie(
    config_path: Path | None,
    data_dir: Path | None,
    host: str | None,
    port: int | None,
    metadata: str | None,
    advertised_address: str | None,
    bookie_id: str | None,
    rack: str | None,
    http_port: int | None,
    init_cluster: bool,
) -> None:
    """Run one bookie composed from the config file; prints 'listening on HOST:PORT' (after
    'admin http on URL' when the admin HTTP service is on), and ', advertised as HOST:PORT'
    after it when clients reach it at another address (a wildcard bind host, a NAT)."""
    overrides = {
        "data_dir": data_dir, "host": host, "port": port, "metadata": metadata, "bookie_id": bookie_id, "rack": rack,
        "advertised_address": advertised_address,
    }
    http = {"enabled": True, "port": http_port} if http_port is not None else None
    config = load_config(config_path, overrides, http)
    level, log_format = click.get_current_context().meta.get(LOG_OVERRIDES, (None, None))
    logging_config = attrs.evolve(config.logging, format=log_format) if log_format else config.logging
    setup_logging(logging_config, level=level)
    plugins = PluginManager(disabled=config.plugins.disable)
    plugins.check_config(config)  # every section's mistakes before anything starts
    service = compose_bookie(config, plugins, init_cluster=init_cluster)

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                host_port = await nursery.start(service.run)
                if service.admin_url:
                    click.echo(f"admin http on {service.admin_url}")  # before "listening on": launchers read both
                listening = f"listening on {host_port[0]}:{host_port[1]}"
                if service.advertised is not None and str(service.advertised) != listening.split()[-1]:
                    listening += f", advertised as {service.advertised}"  # launchers take the last word
                click.echo(listening)
                sys.stdout.flush()
                nursery.start_soon(_stop_on_signal, signals, service)

    trio.run(run)


def admin_server(service: BookieService) -> AdminHttp:
    """:class:`bkframe.admin.AdminServer`, imported when a bookie starts one ([http] enabled):
    hypercorn and prometheus_client were a quarter of every bookie's start (~0.25 CPU-s)."""
    from bkframe.admin.http import AdminServer

    return AdminServer(service)


def subscription_host(bookie: Bookie, store: MetadataStore, bookie_id: str) -> SubscriptionHost:
    """The host of subscription owners a bookie runs (``[subscriptions] enabled``): its owners
    take subscriptions with a client made as the in-bookie autorecovery's, under the bookie's id."""
    from bkframe.subscriptions.host import SubscriptionHost, in_bookie_client
    from bkframe.subscriptions.in_bookie import InBookieAdds

    settings = ClientSettings.for_bookie(bookie.config, bookie.own_credential())
    # The owners' state-ledger appends to this bookie skip the socket; served as a
    # connection of the bookie's own (plain access: the adds carry the ledger's key).
    adds = InBookieAdds(bookie.requests, Access(f"subscriptions of {bookie_id}"), bookie.ready)
    return SubscriptionHost(
        bookie.config.subscriptions, bookie_id, client_factory=in_bookie_client(store, bookie.plugins, settings),
        in_bookie=adds,
    )


def compose_bookie(config: Config, plugins: PluginManager, *, init_cluster: bool = False) -> BookieService:
    """A whole bookie as ``bkframe bookie`` runs it: the service with BP-46 limbo repair,
    the admin HTTP service, the in-bookie autorecovery and the subscription host (the parts that need more than
    :mod:`bkframe.bookie` are handed to it here, where every part may be imported).
    ``init_cluster``: ``--init-cluster`` (see :class:`BookieService`)."""
    return BookieService(
        config, plugins, repair=LimboRepair, admin=admin_server, autorecovery=in_bookie,
        subscriptions=subscription_host, init_cluster=init_cluster, settle_python_gc=True,
    )


async def _stop_on_signal(signals: AsyncIterator[int], service: BookieService) -> None:
    async for signum in signals:
        logging.getLogger("bkframe").info("received %s; draining and stopping", signal.Signals(signum).name)
        service.stop()
        return
