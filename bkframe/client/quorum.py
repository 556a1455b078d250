"""Asking several bookies at once and stopping as soon as the answers decide.

A quorum decision (fencing, a recovery read or write-back, a LAC read, a long poll) must
not wait for the slowest bookie: :func:`ask_bookies` asks each bookie in a task of its own
-- its connect, then its request -- and hands every answer, as it arrives, to a ``decide``
callback that says when enough is known. The other asks are then abandoned: a connect
under way goes on in the pool (:mod:`bkframe.client.bookies.pool`), ready for later requests, and a late
answer is dropped. Each request carries its own timeout, so a hung bookie yields ``None``
after it, not never.

:func:`covered` is BookKeeper's quorum coverage rule, which LAC reads decide by.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import TypeVar

import anyio

from bkframe.client.bookies.connection import BookieClient
from bkframe.client.bookies.pending_response import PendingResponse
from bkframe.client.bookies.pool import BookiePool
from bkframe.core.metadata import LedgerMetadata
from bkframe.errors import BKError, MetadataError
from bkframe.proto.base import Reply

log = logging.getLogger("bkframe.client")

#: ``decide(bookie_id, response)``: ``response`` is ``None`` when the bookie could not be
#: reached or did not answer in time. Return True once the outcome is decided.
R = TypeVar("R", bound=Reply)


async def ask_bookies(
    pool: BookiePool,
    bookies: Sequence[str],
    submit: Callable[[BookieClient], PendingResponse[R]],
    decide: Callable[[str, R | None], bool],
    *,
    send_late: bool = False,
) -> None:
    """Send ``submit(connection)`` to every bookie; feed answers to ``decide`` until it
    returns True or every bookie has answered (or failed, or timed out).

    With ``send_late``, a bookie still being connected to when the answers decided gets
    its request all the same once connected (nobody waits for it): for writes whose
    copies beyond the quorum are worth having. An error that is not a bookie's failure
    (a refused authentication) ends the call and is raised.
    """
    bookies = list(dict.fromkeys(bookies))
    if not bookies:
        return
    sent: set[str] = set()
    answered: set[str] = set()
    decided = False
    error: BKError | None = None
    async with anyio.create_task_group() as nursery:

        async def ask(bookie_id: str) -> None:
            nonlocal decided, error
            response: R | None
            try:
                conn = await pool.get(bookie_id)
                pending = submit(conn)
                sent.add(bookie_id)
                response = await pending.wait()
            except (ConnectionError, MetadataError) as e:
                pool.health.failed(bookie_id, str(e))
                response = None
            except BKError as e:
                # Not this bookie's failure alone (a refused token): the caller's, at once.
                error = error or e
                nursery.cancel_scope.cancel()
                return
            answered.add(bookie_id)
            if decide(bookie_id, response):
                decided = True
                nursery.cancel_scope.cancel()

        for bookie_id in bookies:
            nursery.start_soon(ask, bookie_id)
    if error is not None:
        raise error
    if send_late and decided:
        for bookie_id in bookies:
            if bookie_id not in sent and bookie_id not in answered:
                pool.nursery.start_soon(_send_late, pool, bookie_id, submit)


async def _send_late(pool: BookiePool, bookie_id: str, submit: Callable[[BookieClient], PendingResponse[R]]) -> None:
    # A task of the client: bounded by the connect timeout, then the request is on its
    # way and its answer (or timeout) is the connection's business.
    try:
        submit(await pool.get(bookie_id))
    except (ConnectionError, BKError) as e:
        log.debug("a request to bookie %s after its quorum had decided was not sent: %s", bookie_id, e)


def covered(ensemble_size: int, write_quorum: int, ack_quorum: int, heard: Collection[int]) -> bool:
    """BookKeeper's quorum coverage (``RoundRobinDistributionSchedule``): every write set
    has fewer than A bookies not in ``heard`` (ensemble indices). Then every entry that A
    bookies acknowledged has one of them in ``heard``: the highest LAC heard is at least
    the LAC of every acknowledged add, so nobody else need be asked."""
    e, w = ensemble_size, write_quorum
    return all(sum((i + j) % e not in heard for j in range(w)) < ack_quorum for i in range(e))


class Coverage:
    """:func:`covered` over the answers of a ledger's last fragment as they come: what a LAC
    read and a long poll stop on."""

    def __init__(self, metadata: LedgerMetadata) -> None:
        #: The bookies to ask.
        self.ensemble = metadata.fragments[-1][1]
        self._index = {b: i for i, b in enumerate(self.ensemble)}
        self._quorums = metadata.write_quorum, metadata.ack_quorum
        self._heard: set[int] = set()

    def heard(self, bookie_id: str) -> bool:
        """Count ``bookie_id``'s answer; whether the answers so far cover every write set."""
        self._heard.add(self._index[bookie_id])
        return covered(len(self.ensemble), *self._quorums, self._heard)
