"""The tiers a client has opened, one per URI, closed with the client.

A log's offloaded segments name their tier by URI (:class:`~bkframe.tiering.offload_record.Offload`);
a reader or an offload opens it through the client's plugin manager
(:meth:`~bkframe.core.plugin_manager.PluginManager.tier`) the first time and reuses it: an
S3 tier holds a connection pool, and credentials are found once (the reader's own
environment: the log's record never holds any). Opening and closing run in a worker thread:
a plugin may import its SDK, read a credentials file or resolve an endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from bkframe.core.interfaces.tier import Tier
from bkframe.tiering.async_tier import AsyncTier

log = logging.getLogger("bkframe.tiering")

#: The longest a tier's ``close`` may take as the client closes.
CLOSE_TIMEOUT_S = 10.0


class OpenTiers:
    """``tiers.get(uri)``: the client's one :class:`AsyncTier` for ``uri``."""

    def __init__(self, open_tier: Callable[[str], Tier], *, timeout_s: float = 30.0) -> None:
        self._open = open_tier
        #: Each tier call's deadline (:attr:`AsyncTier.timeout_s`).
        self.timeout_s = timeout_s
        self._tiers: dict[str, AsyncTier] = {}
        #: Shared by every tier of the client: the worker threads its tier calls may hold.
        self.limiter = anyio.CapacityLimiter(8)

    async def get(self, uri: str) -> AsyncTier:
        found = self._tiers.get(uri)
        if found is None:
            opened = await anyio.to_thread.run_sync(self._open, uri)
            found = self._tiers.get(uri)  # another task opened it meanwhile: keep one
            if found is not None:
                await anyio.to_thread.run_sync(opened.close)
                return found
            found = AsyncTier(opened, limiter=self.limiter, timeout_s=self.timeout_s)
            # Cached under the URI asked for and the tier's own (normalized) one, which is
            # what the log record names: both find it again.
            self._tiers[uri] = self._tiers[found.uri] = found
        return found

    async def aclose(self) -> None:
        tiers = {id(t): t for t in self._tiers.values()}.values()
        self._tiers.clear()
        for tier in tiers:
            with anyio.move_on_after(CLOSE_TIMEOUT_S):
                try:
                    await anyio.to_thread.run_sync(tier.tier.close, abandon_on_cancel=True)
                except Exception as e:  # noqa: BLE001 - one tier failing to close must not keep the others open
                    log.warning("closing tier %s failed: %s", tier.uri, e)
