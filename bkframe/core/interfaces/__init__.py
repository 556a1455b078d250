"""The interfaces plugins implement, one module each, all here: the journal, ledger storage
and its optional parts, the entry-log manager, ledger types (durability), the metadata
store, placement policies, auth providers and object-store tiers.

A plugin's factory hook (see :mod:`bkframe.core.hookspecs`) returns an object that
satisfies one of these protocols. The bookie and the client only ever talk to these
methods, so a plugin is free in how it does its work, as long as it keeps the documented
guarantees. This module holds the two types they share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

Buffer = bytes | bytearray | memoryview

if TYPE_CHECKING:
    import anyio.abc
    import trio

    #: Where a plugin starts a background task that must outlive the call starting it (a
    #: registration's heartbeat, a lock's keep-alive): a trio nursery (the bookie) or an anyio
    #: task group (the client, under asyncio or trio).
    Spawner: TypeAlias = anyio.abc.TaskGroup | trio.Nursery


def __getattr__(name: str) -> Any:
    """``Spawner`` at run time, made when first asked for: importing it costs trio's imports
    (~0.1 s), which a process that only reads a config or a metadata store does without."""
    if name == "Spawner":
        import anyio.abc
        import trio

        spawner = anyio.abc.TaskGroup | trio.Nursery
        globals()["Spawner"] = spawner
        return spawner
    raise AttributeError(f"module 'bkframe.core.interfaces' has no attribute {name!r}")
