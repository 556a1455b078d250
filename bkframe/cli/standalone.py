"""What a service a bookie can run is given and starts from when it runs alone
(``bkframe autorecovery``, ``bkframe offloader``): the metadata store, a bookie config for
its sections, its name in the locks it takes, and the cluster's own credentials."""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import click
import trio

from bkframe.cli.logging_setup import setup_logging
from bkframe.cli.options import LOG_OVERRIDES, client_security, metadata_option, missing_option
from bkframe.client.settings import ClientSettings
from bkframe.common.cluster_record import require_cluster
from bkframe.core.config import Config, load_config
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.plugin_manager import PluginManager

F = TypeVar("F", bound=Callable[..., Any])


def standalone_options(service: str, config_help: str) -> Callable[[F], F]:
    """``--metadata`` (not required by click: a group's subcommands take their own; see
    :func:`standalone`), ``--config`` (``config_help``: the sections it reads) and ``--holder``."""

    def decorate(fn: F) -> F:
        fn = click.option(
            "--holder", default="", help=f"This service's name in the locks it takes (default {service}@HOST:PID)."
        )(fn)
        fn = click.option(
            "--config", "config_path", type=click.Path(path_type=Path), help=f"A bookie TOML config: {config_help}"
        )(fn)
        return metadata_option(required=False)(fn)

    return decorate


@attrs.frozen
class Standalone:
    metadata: str
    config: Config
    plugins: PluginManager
    #: The client's: TLS and the token from $BKFRAME_TLS_* and --auth-token-file /
    #: $BKFRAME_AUTH_TOKEN(_FILE), as the other client commands.
    settings: ClientSettings
    holder: str

    async def run(self, serve: Callable[[MetadataStore, ClientSettings], Awaitable[None]]) -> None:
        """``serve(store, settings)`` with the metadata store open. The settings authenticate as
        the cluster's own: the services read and copy ledgers without their passwords."""
        store = self.plugins.metadata_store(self.metadata)
        try:
            record = await require_cluster(store)
            await serve(store, self.settings.as_internal(record.secret))
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()


def standalone(
    ctx: click.Context, service: str, metadata: str | None, config_path: Path | None, holder: str
) -> Standalone:
    """The options of :func:`standalone_options`, checked and loaded. A long-running service
    logs as a bookie does (its config's [logging], -v / --log-format over it), and a wrong
    plugin section ([placement] policy) fails here, not in the service."""
    if not metadata:
        raise missing_option(ctx, "metadata")
    config = load_config(config_path)
    level, log_format = ctx.meta.get(LOG_OVERRIDES, (None, None))
    setup_logging(attrs.evolve(config.logging, format=log_format) if log_format else config.logging, level=level)
    plugins = PluginManager(disabled=config.plugins.disable)
    plugins.check_config(config)
    settings = ClientSettings.from_placement_section(config.placement, **client_security())
    return Standalone(metadata, config, plugins, settings, holder or f"{service}@{socket.gethostname()}:{os.getpid()}")
