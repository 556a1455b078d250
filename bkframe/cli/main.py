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
import re
from collections.abc import Callable
from typing import Any

import click

from bkframe.cli.errors import Group
from bkframe.cli.logging_setup import setup_logging
from bkframe.cli.options import LOG_OVERRIDES
from bkframe.core.config import FORMATS, LoggingConfig

#: ``-v``, ``-vv``... and ``--verbose``: the root group's, wherever they are on the line.
VERBOSE = re.compile(r"-v+|--verbose")
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


#: Each command, as ``module:attribute`` or a function that builds it, and the line the root
#: ``--help`` shows for it: a command is imported only when it runs, so that ``bkframe ledger
#: ...`` does not pay for the benchmarks', the bookie's and the HTTP server's imports (~0.15 s
#: of CPU a run), and ``bkframe --help`` for none of them (tests/cli/test_help_text.py checks
#: that each line is the command's own).
COMMANDS: dict[str, tuple[str | Callable[[], click.Command], str]] = {
    "autorecovery": (
        "bkframe.cli.autorecovery:autorecovery",
        "Run autorecovery alone (an auditor candidate and a replication worker) until SIGTERM / SIGINT; "
        "'bkframe autorecovery status' shows what it is doing.",
    ),
    "bench": (
        "bkframe.cli.bench:bench",
        "Benchmarks: appends, the sweep, event loops, logs, scale, autorecovery (docs/benchmarks/).",
    ),
    "bookie": (
        "bkframe.cli.bookie:bookie",
        "Run one bookie composed from the config file; prints 'listening on HOST:PORT' (after 'admin http on URL' "
        "when the admin HTTP service is on), and ', advertised as HOST:PORT' after it when clients reach it at "
        "another address (a wildcard bind host, a NAT).",
    ),
    "bookies": ("bkframe.cli.bookies:bookies", "Inspect the cluster's bookies."),
    "cluster": (
        "bkframe.cli.cluster:cluster",
        "The cluster record of a metadata store: a cluster is created on purpose, once.",
    ),
    "cookie": (
        "bkframe.cli.cookie:cookie",
        "A bookie's cookies: its identity on its data dir and in the metadata store.",
    ),
    "ledger": ("bkframe.cli.ledger:ledger", "Work with ledgers through the client library."),
    "log": (
        _log_group,
        "Named logs: unbounded streams made of ledgers, with one writer, cursors and retention.",
    ),
    "plugin": (
        "bkframe.cli.plugin_new:plugin_group",
        "Write plugins of your own (docs/plugins.md).",
    ),
    "plugins": (
        "bkframe.cli.plugins:plugins",
        "List the loaded plugins (distribution, hooks), every component they register by kind and name, "
        "and the plugins left out (broken or disabled).",
    ),
    "sandbox": ("bkframe.cli.sandbox:sandbox", "Run a local cluster: N bookie processes on one metadata store."),
    "sub": (
        "bkframe.cli.sub:sub_group",
        "Subscriptions: a log's records shared by many consumers, each leased, acked once.",
    ),
    "tier": (
        "bkframe.cli.tier:tier_group",
        "Object-store tiers of offloaded log segments (docs/tiered-storage.md).",
    ),
    "offloader": (
        "bkframe.cli.offloader:offloader",
        "Run the offload service: move logs' closed segments to their tiers by their settings and delete "
        "their ledgers after the deletion lag, until SIGTERM / SIGINT.",
    ),
}


class LazyGroup(Group):
    """The root group: its commands come from :data:`COMMANDS` when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """``bkframe log list -v`` as ``bkframe -v log list``: ``-v`` anywhere before ``--``
        (no command has a -v of its own; tests/cli/test_help_text.py checks that none does)."""
        end = args.index("--") if "--" in args else len(args)
        verbose = [a for a in args[:end] if VERBOSE.fullmatch(a)]
        rest = [a for a in args[:end] if not VERBOSE.fullmatch(a)]
        return super().parse_args(ctx, [*verbose, *rest, *args[end:]])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        target, _ = COMMANDS[cmd_name]
        if callable(target):
            return target()
        module, attribute = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their lines from :data:`COMMANDS`, as click would list them,
        without importing one."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, click.Command(name, help=summary).get_short_help_str(limit)) for name, (_, summary) in
                sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        from bkframe.cli.interrupt import reported  # trio: not for --help, nor --version

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

