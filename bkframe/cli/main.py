"""The ``bkframe`` command line: the root group and its commands, one module per group.

``bookie`` (:mod:`.bookie`), ``plugins`` (:mod:`.plugins`), ``sandbox`` (:mod:`.sandbox`),
``bench`` (:mod:`.bench`), ``bench-sweep`` (:mod:`.bench_sweep`, plots in :mod:`.bench_plots`), ``bench-autorecovery``
(:mod:`.bench_autorecovery`), ``bench-scale metadata`` (:mod:`.bench_scale_metadata`),
``ledger ...`` (:mod:`.ledger`), ``log ...`` (:mod:`.log`), ``bookies ...`` (:mod:`.bookies`),
``cluster ...`` (:mod:`.cluster`), ``cookie ...`` (:mod:`.cookie`), ``autorecovery ...`` (:mod:`.autorecovery`),
``tier ...`` (:mod:`.tier`).
Errors bkframe raises on purpose become one line and exit status 1 (:mod:`.errors`).
"""

from __future__ import annotations

import logging

import click

from bkframe.cli.autorecovery import autorecovery
from bkframe.cli.bench import bench
from bkframe.cli.bench_autorecovery import bench_autorecovery
from bkframe.cli.bench_scale import bench_scale
from bkframe.cli.bench_sweep import bench_sweep
from bkframe.cli.bookie import bookie
from bkframe.cli.bookies import bookies
from bkframe.cli.cluster import cluster
from bkframe.cli.cookie import cookie
from bkframe.cli.errors import Group
from bkframe.cli.ledger import ledger
from bkframe.cli.log import log_group
from bkframe.cli.log_tiering import configure as log_configure
from bkframe.cli.log_tiering import offload as log_offload
from bkframe.cli.options import LOG_OVERRIDES
from bkframe.cli.plugins import plugins
from bkframe.cli.sandbox import sandbox
from bkframe.cli.tier import tier_group
from bkframe.core.log_config import FORMATS, LoggingConfig, setup_logging

#: Commands that run until stopped and log as services do: their libraries' warnings stay.
SERVICES = ("bookie", "autorecovery")
#: Libraries whose warnings one-shot commands leave out (unless -v).
QUIET_LIBRARIES = ("kazoo", "etcd3gw", "urllib3", "botocore")


@click.group(cls=Group)
@click.version_option(package_name="bkframe", prog_name="bkframe")  # the installed distribution's version
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
@click.option(
    "--log-format",
    type=click.Choice(FORMATS),
    default=None,
    help="Log lines as text or JSON (default: text; a bookie: its [logging] format).",
)
@click.pass_context
def main(ctx: click.Context, verbose: int, log_format: str | None) -> None:
    """bkframe: a replicated, durable log store in the model of Apache BookKeeper."""
    # A bookie sets up logging again from its [logging] section; these win over it when given.
    ctx.meta[LOG_OVERRIDES] = (logging.WARNING - 10 * verbose if verbose else None, log_format)
    setup_logging(LoggingConfig(level="warning", format=log_format or "text"), level=logging.WARNING - 10 * verbose)
    if not verbose and ctx.invoked_subcommand not in SERVICES:
        # A one-shot command's error line says what failed; a client library's retries on
        # the way ("Connection dropped", kazoo's) would only bury it. -v shows them.
        for name in QUIET_LIBRARIES:
            logging.getLogger(name).setLevel(logging.ERROR)


for log_command in (log_offload, log_configure):
    log_group.add_command(log_command)
for command in (bookie, plugins, sandbox, bench, bench_sweep, ledger, log_group, bookies, cluster, cookie,
                autorecovery, bench_autorecovery, bench_scale, tier_group):
    main.add_command(command)
