"""Work done while holding a metadata-store lock (a replication worker's claim on a ledger,
the offload service's on a log or a tier's sweep): cancelled the moment the lock is lost,
and the lock released afterwards without ever failing the caller."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from bkframe.core.interfaces.metadata_store import Lock

T = TypeVar("T")


async def while_held(lock: Lock, work: Callable[[], Awaitable[T]], logger: logging.Logger, lost: str) -> T | None:
    """``await work()``, cancelled if ``lock`` is lost meanwhile (then ``lost`` is logged as
    a warning and None returned: whatever was not compare-and-set yet is abandoned). An
    error of ``work`` is raised as it is, not in an exception group."""
    result: list[T] = []
    error: list[BaseException] = []

    async def run() -> None:
        try:
            result.append(await work())
        except Exception as e:  # noqa: BLE001 - re-raised below, outside the nursery
            error.append(e)
        finally:
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await lock.lost.wait()
        logger.warning("%s", lost)
        nursery.cancel_scope.cancel()
    if error:
        raise error[0]
    return result[0] if result else None


async def release_quietly(lock: Lock, timeout_s: float, logger: logging.Logger, what: str) -> None:
    """Release ``lock`` (shielded, within ``timeout_s``); a failure is logged: the lock then
    expires by its TTL."""
    with trio.CancelScope(shield=True), trio.move_on_after(timeout_s):
        try:
            await lock.release()
        except Exception as e:  # noqa: BLE001 - the lock then expires by its TTL
            logger.warning("could not release %s (%r); it expires by itself", what, e)
