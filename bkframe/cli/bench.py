"""``bkframe bench ...``: the benchmarks' command group. The commands live in
:mod:`bkframe.bench`, one module per subject, and are imported only when one runs (or
``--help`` lists them), as the root group's are."""

from __future__ import annotations

import importlib

import click

#: Each subcommand as ``module:attribute``; a dict is a group of its own (``bench scale ...``).
SUBCOMMANDS: dict[str, str | dict[str, str]] = {
    "appends": "bkframe.bench.appends:appends",
    "autorecovery": "bkframe.bench.autorecovery:autorecovery",
    "backends": "bkframe.bench.backends:backends",
    "log": "bkframe.bench.logs:log",
    "scale": {
        "bookie": "bkframe.bench.scale_bookie:bench_scale_bookie",
        "metadata": "bkframe.bench.scale_metadata:metadata",
    },
    "sweep": "bkframe.bench.sweep:sweep",
}
HELP = {
    "scale": "Measure the scale targets of docs/scaling.md (a million ledgers).",
}


class LazyCommands(click.Group):
    """A group whose commands are imported from ``targets`` when asked for."""

    def __init__(self, *args: object, targets: dict[str, str | dict[str, str]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.targets = targets

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.targets)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.targets.get(cmd_name)
        if target is None:
            return None
        if isinstance(target, dict):
            return LazyCommands(name=cmd_name, targets=dict(target), help=HELP.get(cmd_name))
        module, attribute = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command


@click.group(cls=LazyCommands, targets=SUBCOMMANDS)
def bench() -> None:
    """Benchmarks: appends, the sweep, event loops, logs, scale, autorecovery (docs/benchmarks/)."""
