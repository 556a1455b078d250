"""Metadata store calls bounded by the client's own ``metadata_timeout_s``.

A store's call may block in a worker thread that cancelling its caller cannot stop (the loop
waits for a thread it did not abandon): the etcd store tries each member for 5 s and goes
on trying for 30 s, the ZooKeeper store's kazoo retries for 30 s. A caller that must fail
within the client's own timeout runs the call in the client's nursery and stops waiting at
its deadline: the call goes on, and what it returns is dropped. Its outcome is unknown -- a
compare-and-set may still land -- so the error says so (:class:`MetadataTimeoutError`), and
a caller must not undo what the call may yet do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from bkframe.errors import MetadataError

T = TypeVar("T")


class MetadataTimeoutError(MetadataError):
    """The store did not answer in time; the call may still take effect."""


async def bounded(nursery: anyio.abc.TaskGroup, timeout_s: float, what: str, call: Callable[[], Awaitable[T]]) -> T:
    """``await call()``, or :class:`MetadataTimeoutError` (naming ``what``) once
    ``timeout_s`` passed; the call then goes on in ``nursery``, its result dropped."""
    done = anyio.Event()
    results: list[T] = []
    errors: list[Exception] = []

    async def run() -> None:
        try:
            results.append(await call())
        except Exception as e:  # noqa: BLE001 - handed to the caller, who is waiting for it
            errors.append(e)
        finally:
            done.set()

    nursery.start_soon(run)
    with anyio.move_on_after(timeout_s):
        await done.wait()
    if errors:
        raise errors[0]
    if results:
        return results[0]
    if done.is_set():
        raise MetadataError(f"{what}: the call was cancelled (the client is closing)")
    raise MetadataTimeoutError(
        f"{what}: the metadata store did not answer in {timeout_s:g} s (the client's metadata_timeout_s); "
        f"whether it took effect is unknown"
    )
