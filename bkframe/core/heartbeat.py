"""The keep-alive of a bookie registration or a lock, as :class:`~bkframe.core.interfaces.
metadata_store.MetadataStore` asks of a store whose leases need renewing: it runs in the
holder's nursery until the registration is closed or the lock released.

A store says how long to pause before each renewal and what one renewal does (and whether
the lease is still held after it); :class:`Heartbeat` keeps the part that is easy to get
wrong: closing stops the renewals and waits for one under way, so that a late renewal
cannot bring back a lease the holder has just deleted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio


class Heartbeat:
    """Renewals of one lease: :meth:`run` them in the holder's nursery, :meth:`stop` them
    before deleting the lease."""

    def __init__(self) -> None:
        self._scope = anyio.CancelScope()
        self._stopped = anyio.Event()

    async def run(self, pause: Callable[[], float], renew: Callable[[], Awaitable[bool]]) -> None:
        """Sleep ``pause()`` seconds, then ``renew()``, again and again until :meth:`stop`,
        or until ``renew`` returns False: the lease is lost and there is nothing to renew."""
        try:
            with self._scope:
                while True:
                    await anyio.sleep(pause())
                    if not await renew():
                        return
        finally:
            self._stopped.set()

    async def stop(self) -> None:
        """Cancel the renewals and wait until :meth:`run` has returned."""
        self._scope.cancel()
        await self._stopped.wait()
