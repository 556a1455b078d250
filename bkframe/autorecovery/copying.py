"""Copying entries between bookies: which replicas hold what (LIST_ENTRIES), and fetching
entries from replicas with their digests checked -- or, when a copy cannot be verified
(an HMAC digest and no password), only copies that agree.

Shared by the two repairs of :mod:`bkframe.autorecovery`: a bookie filling what it lost
(:mod:`.data_integrity`, BP-46) and autorecovery copying a lost bookie's fragments to
another bookie (:mod:`.worker`).
"""

from __future__ import annotations

import logging

import trio

from bkframe.client.bookies.pool import BookiePool
from bkframe.client.entry_format import Digester, DigestMismatchError
from bkframe.core.interfaces import Buffer
from bkframe.errors import BKError
from bkframe.proto.codes import Status

log = logging.getLogger("bkframe.copying")

#: A peer that does not answer a copy's request within this long is skipped this round.
PEER_TIMEOUT_S = 10.0


async def list_on_peers(
    pool: BookiePool, ledger_id: int, lo: int, hi: int, peers: list[str], *, skip_limbo: bool = False
) -> dict[str, set[int]]:
    """LIST_ENTRIES on each reachable peer: which of ``lo..hi`` it holds (none if it does not
    have the ledger). A peer that cannot be asked or answers with another error is left
    out, and so is one with the ledger in limbo if ``skip_limbo`` (its list is not final)."""
    holders: dict[str, set[int]] = {}

    async def list_one(peer: str) -> None:
        try:
            conn = await pool.get(peer)
            held: set[int] = set()
            first = lo
            while first != -1:
                r = await conn.submit_list_entries(ledger_id, first, hi, timeout_s=PEER_TIMEOUT_S).wait()
                if r.status == Status.NO_LEDGER:
                    break
                if r.status != Status.OK or (skip_limbo and r.limbo):
                    return
                for a, b in r.runs:
                    held.update(range(a, b + 1))
                first = r.next_first
            holders[peer] = held
        except ConnectionError:
            return

    async with trio.open_nursery() as nursery:
        for peer in peers:
            nursery.start_soon(list_one, peer)
    return holders


async def fetch_entries(
    pool: BookiePool, ledger_id: int, chunk: list[tuple[int, list[str]]], digester: Digester
) -> tuple[list[int], list[Buffer]]:
    """Read each ``(entry id, peers)`` of ``chunk`` from its peers in turn; requests to one
    peer are pipelined. Returns the entry ids ascending and their data; an entry no peer
    could give is a :class:`BKError` (the repair tries again later).

    A copy that cannot be verified (HMAC without the password) is taken only when two
    peers hold the same bytes and none differs: a single copy may be the corrupt one.
    """
    fetch = _fetch_verified if digester.verifies else _fetch_agreeing
    got = await fetch(pool, ledger_id, chunk, digester)
    lost = [entry_id for entry_id, _ in chunk if entry_id not in got]
    if lost:
        raise BKError(
            f"ledger {ledger_id}: no replica could give entries {lost[:10]}"
            f"{' ...' if len(lost) > 10 else ''} (fewer than needed are reachable); retrying later"
        )
    ids = sorted(got)
    return ids, [got[i] for i in ids]


async def _fetch_verified(
    pool: BookiePool, ledger_id: int, chunk: list[tuple[int, list[str]]], digester: Digester
) -> dict[int, bytes]:
    got: dict[int, bytes] = {}
    rounds = max((len(peers) for _, peers in chunk), default=0)
    for r in range(rounds):
        by_peer: dict[str, list[int]] = {}
        for entry_id, peers in chunk:
            if entry_id not in got and r < len(peers):
                by_peer.setdefault(peers[r], []).append(entry_id)
        async with trio.open_nursery() as nursery:
            for peer, ids in by_peer.items():
                nursery.start_soon(_fetch_from, pool, peer, ledger_id, ids, got, digester)
    return got


async def _fetch_agreeing(
    pool: BookiePool, ledger_id: int, chunk: list[tuple[int, list[str]]], digester: Digester
) -> dict[int, bytes]:
    got: dict[int, bytes] = {}
    copies: dict[str, dict[int, bytes]] = {}
    by_peer: dict[str, list[int]] = {}
    for entry_id, peers in chunk:
        for peer in peers:
            by_peer.setdefault(peer, []).append(entry_id)
    async with trio.open_nursery() as nursery:
        for peer, ids in by_peer.items():
            copies[peer] = {}
            nursery.start_soon(_fetch_from, pool, peer, ledger_id, ids, copies[peer], digester)
    for entry_id, peers in chunk:
        seen = [copies[peer][entry_id] for peer in peers if entry_id in copies.get(peer, {})]
        if len(seen) >= 2 and len(set(seen)) == 1:
            got[entry_id] = seen[0]
        elif seen:
            log.warning(
                "copy of ledger %d: entry %d has %d cop%s that cannot be verified without the password%s; "
                "not copying it", ledger_id, entry_id, len(seen), "y" if len(seen) == 1 else "ies",
                " and they differ" if len(set(seen)) > 1 else "",
            )
    return got


async def _fetch_from(
    pool: BookiePool, peer: str, ledger_id: int, ids: list[int], got: dict[int, bytes], digester: Digester
) -> None:
    try:
        conn = await pool.get(peer)
        pendings = [(entry_id, conn.submit_read(ledger_id, entry_id, timeout_s=PEER_TIMEOUT_S)) for entry_id in ids]
        for entry_id, pending in pendings:
            response = await pending.wait()
            if response.status != Status.OK:
                continue
            data = bytes(response.data)
            try:
                digester.decode(ledger_id, entry_id, data)
            except DigestMismatchError as e:
                log.warning("copy of ledger %d: %s on %s; trying another peer", ledger_id, e, peer)
                continue
            got[entry_id] = data
    except ConnectionError as e:
        log.info("copy of ledger %d: peer %s unreachable (%s)", ledger_id, peer, e)
