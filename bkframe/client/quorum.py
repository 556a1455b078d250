"""Asking several bookies at once and stopping as soon as the answers decide.

A quorum decision (fencing, a recovery read, a LAC read, a sync) must not wait for the
slowest bookie: :func:`ask_bookies` sends one request to each bookie concurrently and
hands every answer, as it arrives, to a ``decide`` callback that says when enough is
known; the other requests are then abandoned (their late answers are dropped). Each
request carries its own timeout, so a hung bookie yields ``None`` after it, not never.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

from bkframe import proto as p
from bkframe.client.bookie_client import BookieClient, PendingResponse
from bkframe.client.bookie_pool import BookiePool
from bkframe.core.metadata import MetadataError

#: ``decide(bookie_id, response)``: ``response`` is ``None`` when the bookie could not be
#: reached or did not answer in time. Return True once the outcome is decided.
Decide = Callable[[str, p.Response | None], bool]


async def ask_bookies(
    pool: BookiePool,
    bookies: Sequence[str],
    submit: Callable[[BookieClient], PendingResponse],
    decide: Decide,
) -> None:
    """Send ``submit(connection)`` to every bookie; feed answers to ``decide`` until it
    returns True or every bookie has answered (or failed, or timed out)."""
    if not bookies:
        return
    async with trio.open_nursery() as nursery:

        async def ask(bookie_id: str) -> None:
            response: p.Response | None
            try:
                conn = await pool.get(bookie_id)
                response = await submit(conn).wait()
            except (ConnectionError, MetadataError) as e:
                pool.health.failed(bookie_id, str(e))
                response = None
            if decide(bookie_id, response):
                nursery.cancel_scope.cancel()

        for bookie_id in dict.fromkeys(bookies):
            nursery.start_soon(ask, bookie_id)
