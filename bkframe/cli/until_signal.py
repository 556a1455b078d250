"""A service command's main loop: start the service, say so, run until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import click
import trio


async def run_until_signal(start: Callable[..., Awaitable[Any]], started: str, logger: logging.Logger) -> None:
    """``await nursery.start(start)``, print ``started`` on stderr, then run until SIGTERM or
    SIGINT (logged), which cancels the service."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(start)
            click.echo(started, err=True)
            async for signum in signals:
                logger.info("received %s; stopping", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
