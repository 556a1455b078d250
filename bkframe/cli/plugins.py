"""``bkframe plugins``: what is installed -- plugins, their components by kind, and what was left out."""

from __future__ import annotations

import click

from bkframe.core.plugin_manager import PluginManager
from bkframe.core.registry import ComponentKind


@click.command()
def plugins() -> None:
    """List the loaded plugins (distribution, hooks), every component they register by kind
    and name, and the plugins left out (broken or disabled)."""
    pm = PluginManager()
    components = pm.components.components()
    click.echo("plugins:")
    for info in pm.plugins():
        click.echo(f"  {info.name}  [{info.distribution}]  hooks: {', '.join(info.hooks)}")
    click.echo("components:")
    for kind in ComponentKind:
        click.echo(f"  {kind.value}:")
        for c in (c for c in components if c.kind is kind):
            name = f"{c.name}://" if kind.by_scheme else c.name
            if kind is ComponentKind.LEDGER_TYPE:
                name = f"{c.name} (wire id {c.factory.type_id})"
            click.echo(f"    {name}  [{c.plugin}, {c.distribution}]: {c.description}")
    for broken in pm.broken:
        click.echo(f"left out (broken): {broken.name}  [{broken.distribution}]: {broken.error}")
    for name in sorted(pm.disabled):
        click.echo(f"left out (disabled): {name}")
