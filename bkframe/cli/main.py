"""The ``bkframe`` command line: the root group and its commands, one module per group.

``bookie`` (:mod:`.bookie`), ``plugins`` (:mod:`.plugins`), ``sandbox`` (:mod:`.sandbox`),
``bench`` (:mod:`.bench`), ``bench-sweep`` (:mod:`.bench_sweep`, plots in :mod:`.bench_plots`), ``bench-autorecovery``
(:mod:`.bench_autorecovery`),
``ledger ...`` (:mod:`.ledger`), ``log ...`` (:mod:`.log`), ``bookies ...`` (:mod:`.bookies`),
``cookie ...`` (:mod:`.cookie`), ``autorecovery ...`` (:mod:`.autorecovery`). Errors bkframe raises on purpose
become one line and exit status 1 (:mod:`.errors`).
"""

from __future__ import annotations

import logging
import sys

import click

from bkframe.cli.autorecovery import autorecovery
from bkframe.cli.bench import bench
from bkframe.cli.bench_autorecovery import bench_autorecovery
from bkframe.cli.bench_sweep import bench_sweep
from bkframe.cli.bookie import bookie
from bkframe.cli.bookies import bookies
from bkframe.cli.cookie import cookie
from bkframe.cli.errors import Group
from bkframe.cli.ledger import ledger
from bkframe.cli.log import log_group
from bkframe.cli.plugins import plugins
from bkframe.cli.sandbox import sandbox


@click.group(cls=Group)
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """bkframe: a replicated, durable log store in the model of Apache BookKeeper."""
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


for command in (bookie, plugins, sandbox, bench, bench_sweep, ledger, log_group, bookies, cookie, autorecovery,
                bench_autorecovery):
    main.add_command(command)
