"""Run one async test under each event loop the client supports: asyncio and trio.

The client is written on anyio, so the same code runs natively under ``asyncio.run`` and
``trio.run``; a test decorated with :func:`on_both_backends` proves it, once per loop::

    @on_both_backends
    async def test_appends_read_back(cluster):
        async with bkframe.open_client(cluster.metadata) as client:
            ...

The decorated test becomes a plain function with a ``backend`` parameter (``trio`` or
``asyncio``, a test id each) that runs the coroutine with :func:`anyio.run`: pytest-trio's
``trio_mode`` leaves plain functions alone, so the two plugins never both claim the test.
Its fixtures must be synchronous (a cluster, a server, a path); its body uses ``anyio``, not
``trio``, for whatever it does beside the client.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import sniffio

#: The event loops the client runs on, in the order tests run on them.
BACKENDS = ("trio", "asyncio")


def on_both_backends(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """``test`` once under trio and once under asyncio (parametrized as ``backend``)."""
    return on_backends(*BACKENDS)(test)


def on_backends(*backends: str) -> Callable[[Callable[..., Awaitable[None]]], Callable[..., None]]:
    """``test`` under each of ``backends``: ``@on_backends("asyncio")`` for a test too slow
    to run twice (the suite's budget), whose concern other tests cover on trio."""
    unknown = set(backends) - set(BACKENDS)
    if unknown or not backends:
        raise ValueError(f"on_backends: give some of {BACKENDS}, not {sorted(unknown) or 'none'}")
    return lambda test: _parametrized(test, backends)


def _parametrized(test: Callable[..., Awaitable[None]], backends: tuple[str, ...]) -> Callable[..., None]:
    signature = inspect.signature(test)
    if "backend" in signature.parameters:
        raise TypeError(f"{test.__name__}: on_backends adds the 'backend' parameter itself")

    @functools.wraps(test)
    def run(*args: Any, backend: str, **kwargs: Any) -> None:
        anyio.run(functools.partial(test, *args, **kwargs), backend=backend)

    backend = inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY)
    run.__signature__ = signature.replace(parameters=[*signature.parameters.values(), backend])  # type: ignore[attr-defined]
    del run.__wrapped__  # pytest and pytest-trio must see the plain function, not the coroutine
    return pytest.mark.parametrize("backend", backends)(run)  # type: ignore[no-any-return]



def per_backend(name: str) -> str:
    """``name`` with the running event loop's name after it: what a test run under each loop
    calls a log (or anything else named) on a cluster both runs share."""
    return f"{name}-{sniffio.current_async_library()}"
