"""A blocking facade over the async client, for synchronous code (scripts, Spark tasks):
``with bkframe.connect(uri) as bk: ...``.

Every public method and property of :class:`~bkframe.client.client.Client`, the ledger
handles, :class:`~bkframe.client.logs.api.Logs` and the log writer and reader has a twin
with the same name and signature: ``await x.f(...)`` becomes ``x.f(...)``, an async iterator
a :class:`BlockingTail`. The twins are generated (:mod:`bkframe.client.blocking_twins`, by
``scripts/gen_blocking.py``) from the async classes, so signatures, defaults and docstrings
live once; what differs is written in :mod:`bkframe.client.blocking_extras`.
tests/client/test_api_parity.py checks the two APIs against each other.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any, ParamSpec

from bkframe.client.blocking_extras import ClientBase
from bkframe.client.blocking_tail import BlockingTail
from bkframe.client.blocking_twins import (
    BlockingClient,
    BlockingLogReader,
    BlockingLogs,
    BlockingLogWriter,
    BlockingMessage,
    BlockingReadHandle,
    BlockingSubscription,
    BlockingWriteHandle,
)
from bkframe.client.client import Client, open_client
from bkframe.client.run_ahead import RunAhead

P = ParamSpec("P")

__all__ = [
    "BlockingClient",
    "BlockingLogReader",
    "BlockingLogWriter",
    "BlockingLogs",
    "BlockingMessage",
    "BlockingReadHandle",
    "BlockingSubscription",
    "BlockingTail",
    "BlockingWriteHandle",
    "RunAhead",
    "connect",
]


def _blocking(open_: Callable[P, AbstractAsyncContextManager[Client]]) -> Callable[P, BlockingClient]:
    """``connect``: ``open_`` (``open_client``) run in a blocking client's thread.

    Why it is made, not written: ``open_client``'s keyword signature (``plugins``,
    ``settings``, ``metrics_registry``, the settings' overrides) is written once, on
    ``open_client``. Typed through a ParamSpec, ``connect`` has that signature for mypy and
    for IDEs that read types (a wrong ``settings=`` is an error at the call, as it is for
    ``open_client``), and any parameter added there is ``connect``'s at once. What only the
    blocking client takes (``timeout_s``, ``loop``) is declared once too, as the keyword-only
    parameters of :class:`~bkframe.client.blocking_extras.ClientBase`; a ParamSpec cannot add
    keyword parameters, so to the type checker they are among ``open_client``'s ``**overrides``
    (``Any``); the client checks ``loop`` when it starts. ``help()``, ``inspect.signature``
    and the documentation see the whole signature: ``open_client``'s with those two added.
    Not an attrs class of the options: the public calls are keywords
    (``connect(uri, settings=..., add_timeout_s=2.0)``), and they would still have to be
    spelled out on both functions to build it."""
    shared = inspect.signature(open_)
    own = [p for p in inspect.signature(ClientBase).parameters.values() if p.kind is p.KEYWORD_ONLY]

    def connect(*args: P.args, **kwargs: P.kwargs) -> BlockingClient:
        """A blocking client: :func:`~bkframe.client.client.open_client`'s arguments, and
        ``timeout_s`` bounds opening the metadata store; ``loop`` is the event loop its thread
        runs the async client in (``"trio"`` or ``"asyncio"``: the same client either way)."""
        # Any: to the type checker these came in as open_client's **overrides (see above).
        blocking: dict[str, Any] = {p.name: kwargs.pop(p.name) for p in own if p.name in kwargs}
        # A call that does not fit open_client's signature (no URI, a stray positional) fails
        # here, in the caller's thread, naming connect.
        try:
            metadata_uri = shared.bind(*args, **kwargs).arguments["metadata_uri"]
        except TypeError as e:
            raise TypeError(f"connect(): {e}") from None
        return BlockingClient(partial(open_, *args, **kwargs), metadata_uri, **blocking)

    *params, overrides = shared.parameters.values()
    assert overrides.kind is overrides.VAR_KEYWORD, "connect's own keywords go before open_client's **overrides"
    signature = shared.replace(parameters=[*params, *own, overrides], return_annotation=BlockingClient)
    connect.__signature__ = signature  # type: ignore[attr-defined]
    connect.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()} | {"return": BlockingClient}
    # typing.get_type_hints evaluates open_client's annotations (strings) in its module, found by __wrapped__.
    connect.__wrapped__ = open_  # type: ignore[attr-defined]
    return connect


#: ``bkframe.connect(uri, ...)``: :func:`~bkframe.client.client.open_client`'s arguments, and
#: ``timeout_s``, ``loop`` (see :class:`~bkframe.client.blocking_extras.ClientBase`).
connect = _blocking(open_client)
