"""The registered bookies as one client sees them: read once, shared by every create.

Choosing a new ledger's ensemble needs the writable bookies; reading them on every create
costs a round trip per create at least, and more where the store lists bookies one by one.
The client keeps the last listing for at most ``max_age_s`` (``bookie_set_max_age_s``):
creates use it as it is, a listing past half its age is read again in the background (so
creates seldom wait for it), and one past its age is read again before use. A new bookie is
therefore chosen within seconds; a dead one, still in a listing, fails its connection and is
quarantined at once (:mod:`bkframe.client.bookies.health`). Paths where a stale view would cost more than a
round trip -- an ensemble change, recovery's write-back, re-replication, too few bookies
for a create, a bookie that is not in the listing -- ask for a view read after they asked
(``fresh=True``); concurrent askers share one read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio
import attrs

from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import BookieInfo
from bkframe.errors import BKError

log = logging.getLogger("bkframe.client")


@attrs.frozen
class BookieView:
    """The registered bookies as listed at ``read_at`` (event-loop time the listing started)."""

    #: Every live registration, read-only and decommissioned bookies included.
    bookies: tuple[BookieInfo, ...]
    #: Those taking writes: neither read-only nor decommissioned.
    writable: tuple[BookieInfo, ...]
    read_at: float
    addresses: Mapping[str, str] = attrs.field(init=False)

    @addresses.default
    def _addresses(self) -> Mapping[str, str]:
        return {b.bookie_id: b.address for b in (*self.writable, *self.bookies)}


class BookieSet:
    """``await bookie_set.view()``: the registered bookies, at most ``max_age_s`` old."""

    def __init__(self, store: MetadataStore, nursery: anyio.abc.TaskGroup, max_age_s: float) -> None:
        self._store = store
        self._nursery = nursery
        self.max_age_s = max_age_s
        self._view: BookieView | None = None
        self._lock = anyio.Lock()
        self._refreshing = False
        #: Listings read so far (a test and the scale benchmark count them).
        self.reads = 0

    async def view(self, *, fresh: bool = False) -> BookieView:
        """The bookies as listed at most ``max_age_s`` ago; with ``fresh``, as listed after
        this call began (a failure path that must see the bookies as they are now)."""
        now = anyio.current_time()
        view = self._view
        if view is not None and view.read_at >= (now if fresh else now - self.max_age_s):
            if now - view.read_at > self.max_age_s / 2 and not self._refreshing:
                self._refreshing = True
                self._nursery.start_soon(self._refresh)
            return view
        return await self._read(now if fresh else now - self.max_age_s)

    async def _read(self, not_before: float) -> BookieView:
        async with self._lock:
            view = self._view
            if view is not None and view.read_at >= not_before:
                return view  # another task read it meanwhile
            started = anyio.current_time()
            # Writable first: a bookie registering in between is then in both lists.
            writable = await self._store.list_bookies(writable_only=True)
            bookies = await self._store.list_bookies()
            self.reads += 1
            self._view = BookieView(tuple(bookies), tuple(writable), started)
            return self._view

    async def _refresh(self) -> None:
        try:
            await self._read(anyio.current_time())
        except (BKError, OSError) as e:
            # The next create past the view's age reads it again, and fails with the error.
            log.info("reading the registered bookies in the background failed: %s", e)
        finally:
            self._refreshing = False
