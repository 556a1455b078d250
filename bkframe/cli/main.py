"""The ``bkframe`` command line: the root group and its commands, one module per group.

``bookie`` (:mod:`.bookie`), ``plugins`` (:mod:`.plugins`), ``plugin new`` (:mod:`.plugin_new`), ``sandbox`` (:mod:`.sandbox`),
``bench ...`` (:mod:`.bench`: the benchmarks of :mod:`bkframe.bench`),
``ledger ...`` (:mod:`.ledger`), ``log ...`` (:mod:`.log`), ``bookies ...`` (:mod:`.bookies`),
``cluster ...`` (:mod:`.cluster`), ``cookie ...`` (:mod:`.cookie`), ``autorecovery ...`` (:mod:`.autorecovery`),
``tier ...`` (:mod:`.tier`), ``offloader`` (:mod:`.offloader`).
Errors bkframe raises on purpose become one line and exit status 1 (:mod:`.errors`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

import click

from bkframe.cli.errors import Group
from bkframe.cli.interrupt import reported
from bkframe.cli.logging_setup import setup_logging
from bkframe.cli.options import LOG_OVERRIDES
from bkframe.core.config import FORMATS, LoggingConfig

#: Commands that run until stopped and log as services do: their libraries' warnings stay.
SERVICES = ("bookie", "autorecovery", "offloader")
#: Libraries whose warnings one-shot commands leave out (unless -v).
QUIET_LIBRARIES = ("kazoo", "etcd3gw", "urllib3", "botocore")


def _log_group() -> click.Command:
    from bkframe.cli.log import log_group
    from bkframe.cli.log_compaction import compact
    from bkframe.cli.log_tiering import configure, offload

    for command in (offload, configure, compact):
        if command.name not in log_group.commands:  # once: a ClientGroup adds --auth-token-file each time
            log_group.add_command(command)
    return log_group


#: Each command, as ``module:attribute`` or a function that builds it: imported only when it
#: runs (or ``--help`` lists it), so that ``bkframe ledger ...`` does not pay for the
#: benchmarks', the bookie's and the HTTP server's imports (~0.15 s of CPU a run).
COMMANDS: dict[str, str | Callable[[], click.Command]] = {
    "autorecovery": "bkframe.cli.autorecovery:autorecovery",
    "bench": "bkframe.cli.bench:bench",
    "bookie": "bkframe.cli.bookie:bookie",
    "bookies": "bkframe.cli.bookies:bookies",
    "cluster": "bkframe.cli.cluster:cluster",
    "cookie": "bkframe.cli.cookie:cookie",
    "ledger": "bkframe.cli.ledger:ledger",
    "log": _log_group,
    "plugin": "bkframe.cli.plugin_new:plugin_group",
    "plugins": "bkframe.cli.plugins:plugins",
    "sandbox": "bkframe.cli.sandbox:sandbox",
    "sub": "bkframe.cli.sub:sub_group",
    "tier": "bkframe.cli.tier:tier_group",
    "offloader": "bkframe.cli.offloader:offloader",
}


class LazyGroup(Group):
    """The root group: its commands come from :data:`COMMANDS` when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        if callable(target):
            return target()
        module, attribute = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        with reported():  # SIGINT and SIGTERM: one line, exit 130 or 143 (bkframe.cli.interrupt)
            return super().invoke(ctx)


@click.group(cls=LazyGroup)
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

