"""The metadata side of an ensemble change: a PD_JOURNAL writer replaces failed bookies.

The write handle decides *when* (a bookie failed an add, or did not answer in time) and
re-sends what the new bookies should hold; these steps decide *whether* it may (the ledger
is still open and still its own), *with whom* (the placement policy's replacements) and
record it (a new fragment from the first unconfirmed entry, by compare-and-set). Other
ledger types never change their ensemble: see :func:`not_allowed`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import attrs

from bkframe.client.context import ClientContext
from bkframe.client.placement import choose_replacements
from bkframe.core.metadata import LedgerMetadata, LedgerStateName
from bkframe.errors import BadVersionError, LedgerDeletedError, LedgerFencedError, NoSuchLedgerError, UnsupportedError


def not_allowed(ledger_id: int, ledger_type: str, bookie_id: str, reason: str) -> UnsupportedError:
    """Why a ledger of another type than PD_JOURNAL fails instead of changing ensemble."""
    return UnsupportedError(
        f"bookie {bookie_id} failed ({reason}) and ledger {ledger_id} is {ledger_type}: ensemble change is "
        f"only allowed for PD_JOURNAL ledgers, because a replacement bookie cannot be given entries the "
        f"failed one had acknowledged but not synced"
    )


async def check_still_open(ctx: ClientContext, ledger_id: int) -> None:
    """Raise if another client recovered (closed or fenced) or deleted the ledger: its
    bookies may have restarted since and answer "not connected" rather than "fenced", and
    no replacement would make the writer's adds count."""
    try:
        current = await ctx.metadata.read_ledger(ledger_id)
    except NoSuchLedgerError:
        raise LedgerDeletedError(f"ledger {ledger_id} was deleted; this writer must stop") from None
    if current.state != LedgerStateName.OPEN:
        raise LedgerFencedError(
            f"ledger {ledger_id} was {'closed' if current.closed else 'fenced'} by another client "
            f"(its state is {current.state.value}); this writer must stop"
        )


async def replacements(
    ctx: ClientContext, md: LedgerMetadata, ensemble: Sequence[str], failed: Sequence[int], replacing: Collection[str]
) -> list[str]:
    """A new ensemble with a reachable, writable bookie in place of each failed one;
    bookies in quarantine are taken only when no other is left."""
    return await choose_replacements(
        ctx.pool,
        ensemble,
        failed,
        exclude=replacing,
        what=f"ledger {md.ledger_id}",
        write_quorum=md.write_quorum,
    )


async def commit_fragment(ctx: ClientContext, md: LedgerMetadata, boundary: int, ensemble: Sequence[str]) -> LedgerMetadata:
    """Record ``ensemble`` as the ledger's ensemble from entry ``boundary`` on (CAS, re-read
    and retried while the ledger stays open); the metadata as stored."""
    while True:
        fragments = [f for f in md.fragments if f[0] < boundary]
        fragments.append((boundary, tuple(ensemble)))
        new = attrs.evolve(md, fragments=tuple(fragments))
        try:
            return await ctx.metadata.update_ledger(new, md.version)
        except BadVersionError:
            md = await ctx.metadata.read_ledger(md.ledger_id)
            if md.state != LedgerStateName.OPEN:
                raise LedgerFencedError(f"ledger {md.ledger_id} is being recovered by another client") from None
