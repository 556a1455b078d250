"""Ledger recovery: fence, find the last entry, write it back, close with a CAS.

Quorum rules from BP-46 (seed ``BP-46-running-without-the-journal.txt``), with
E, W, A the ensemble size, write quorum and ack quorum:

* fencing (sent to the last fragment's ensemble) completes at EC = E - A + 1 positive
  responses, as soon as they are in (a hung bookie does not hold it up); a fencing read
  never gives an explicit negative (it creates the ledger);
* a recovery read (sent to the entry's write set, fencing each bookie it reads, as
  BookKeeper's recovery reads do: only a fenced bookie's negative is final) is
  *unrecoverable* at QC = W - A + 1
  explicit negatives (NO_ENTRY / NO_LEDGER) and no valid copy; anything else without a
  valid copy is *unknown*, and unknown never truncates: recovery fails and may be retried.
  UNKNOWN (a bookie in limbo), errors and timeouts are never negatives. A read decides as
  soon as its answers do.

One departure from the seed's table, which asks for A positives to call an entry
recoverable: one copy with a valid digest is enough, as in BookKeeper's recovery reads
(the seed's "read entry: positive on a single bookie"). Such a copy was written by the
writer, so keeping it never loses an acknowledged entry (at worst it keeps one that was
never acknowledged, which recovery may always do), and it is written back to the whole
write set. Demanding A copies would stall forever on an entry whose other replicas are
in limbo: their repair waits for the very recovery that waits for them.

A copy the reader cannot verify (an HMAC digest and no password: a bookie repairing a
ledger it lost the key of) counts only when another copy agrees byte for byte and none
disagrees; otherwise the entry is unknown and the ledger is left to a client that holds
the password.

Writing back: each recovered entry is recovery-added to its write set and needs A
acknowledgements; it is written back once A answered (the rest of the write set gets it
too, but a hung bookie's connect or add timeout holds nothing up). When bookies of the
write set are down (so fewer than A answer), they are replaced by other writable bookies
from that entry on, as a writer's ensemble change does; a replacement is fenced before it
gets recovery adds, so every bookie of the closed ledger refuses ordinary adds. The new
fragments are stored in the same CAS that closes the ledger, which succeeds only while
the ledger is IN_RECOVERY with the fragments recovery started from: metadata never shows
a half-done recovery, and a later recovery (after this one crashed) reads
the entries where the writer put them, not where this one began to copy them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
import attrs

from bkframe.client.distribution import replicas
from bkframe.client.entry_format import Digester, DigestMismatchError
from bkframe.client.ledger_access import LedgerAccess
from bkframe.client.placement import choose_replacements
from bkframe.client.quorum import ask_bookies
from bkframe.core.metadata import Fragments, LedgerMetadata, LedgerStateName, ensemble_at
from bkframe.errors import BadVersionError, BKError, LedgerFencedError, RecoveryError, UnauthorizedError
from bkframe.proto.codes import LAST_ENTRY, Status
from bkframe.proto.ops.add import AddResponse
from bkframe.proto.ops.read import ReadResponse

if TYPE_CHECKING:
    from collections.abc import Callable

    from bkframe.client.bookies.connection import BookieClient
    from bkframe.client.bookies.pending_response import PendingResponse
    from bkframe.client.context import ClientContext

log = logging.getLogger("bkframe.recovery")

NEGATIVE = (Status.NO_ENTRY, Status.NO_LEDGER)
#: Entries recovered (read, then written back concurrently) per round.
WRITE_BACK_BATCH = 64


def replace_from(fragments: Fragments, entry_id: int, replacements: dict[int, str]) -> Fragments:
    """``fragments`` with the bookies at the given ensemble indices replaced for the
    entries from ``entry_id`` to the end of the fragment that holds it."""
    out: list[tuple[int, tuple[str, ...]]] = []
    for i, (first, ensemble) in enumerate(fragments):
        end = fragments[i + 1][0] if i + 1 < len(fragments) else None
        if first <= entry_id and (end is None or entry_id < end):
            changed = list(ensemble)
            for idx, bookie_id in replacements.items():
                changed[idx] = bookie_id
            if first < entry_id:
                out.append((first, ensemble))
            out.append((entry_id, tuple(changed)))
        else:
            out.append((first, ensemble))
    return tuple(out)


class Recovery(LedgerAccess):
    def __init__(self, ctx: ClientContext, metadata: LedgerMetadata, master_key: bytes, digester: Digester) -> None:
        super().__init__(ctx, metadata, master_key, digester)
        self.type_id = ctx.ledger_types.named(metadata.ledger_type).type_id
        self.settings = ctx.settings
        #: Where entries are written back: the writer's fragments plus recovery's replacements.
        self.fragments: Fragments = metadata.fragments
        #: Replacements recovery fenced (the writer's own bookies are fenced by _fence).
        self._fenced: set[str] = set()

    async def run(self) -> LedgerMetadata:
        counters = self._ctx.counters
        try:
            md = await self._mark_in_recovery()
            if md.closed:
                return md
            self.fragments = md.fragments
            lac = await self._fence()
            last, length = await self._recover_from(lac)
            md = await self._close(last, length)
        except Exception:
            counters.recovery_failures += 1
            raise
        counters.recoveries += 1
        return md

    async def _mark_in_recovery(self) -> LedgerMetadata:
        md = self.metadata
        while md.state == LedgerStateName.OPEN:
            try:
                md = await self._ctx.metadata.update_ledger(attrs.evolve(md, state=LedgerStateName.IN_RECOVERY), md.version)
            except BadVersionError:
                md = await self._ctx.metadata.read_ledger(self.ledger_id)
        self.metadata = md
        return md

    async def _fence(self) -> int:
        """Fence the last fragment's bookies; return the highest LAC they know."""
        ensemble = self.metadata.fragments[-1][1]
        e, a = self.metadata.ensemble_size, self.metadata.ack_quorum
        ec = e - a + 1
        positives = 0
        answered = 0
        lac = -1
        refused: BKError | None = None

        def decide(bookie_id: str, r: ReadResponse | None) -> bool:
            nonlocal positives, answered, lac, refused
            answered += 1
            if r is not None and r.status == Status.UNAUTHORIZED:
                refused = UnauthorizedError(f"{bookie_id}: wrong password for ledger {self.ledger_id}")
                return True
            if r is not None and r.status == Status.OK:
                positives += 1
                lac = max(lac, r.lac)
                try:
                    entry_lac, _, _ = self._digester.decode(self.ledger_id, r.entry_id, r.data)
                    lac = max(lac, entry_lac)
                except DigestMismatchError:
                    pass  # a corrupt last entry says nothing about the LAC; its fence still counts
            elif r is not None and r.status in (Status.NO_ENTRY, Status.UNKNOWN):
                # Fenced, with nothing to tell (UNKNOWN: in limbo, fenced all the same).
                positives += 1
                lac = max(lac, r.lac)
            # Decided: enough fences, or too few bookies left to reach EC.
            return positives >= ec or positives + (len(ensemble) - answered) < ec

        await ask_bookies(
            self._ctx.pool,
            ensemble,
            self._fencing_read(LAST_ENTRY),
            decide,
        )
        if refused is not None:
            raise refused
        if positives < ec:
            raise RecoveryError(
                f"ledger {self.ledger_id}: only {positives} of {e} bookies acknowledged the fence, "
                f"{ec} (E - A + 1) are needed; retry when more bookies are up"
            )
        # Entries up to the LAC were confirmed; the fragment metadata may start earlier.
        return max(lac, self.metadata.last_entry_id)

    def _fencing_read(self, entry_id: int) -> Callable[[BookieClient], PendingResponse[ReadResponse]]:
        """A fencing read of ``entry_id`` (``LAST_ENTRY``: the bookie's last), as every
        read of recovery is (BookKeeper's FLAG_DO_FENCING)."""
        return lambda conn: conn.submit_read(
            self.ledger_id, entry_id, master_key=self._master_key, fence=True, timeout_s=self.settings.read_timeout_s
        )

    def _replicas(self, fragments: Fragments, entry_id: int) -> list[str]:
        return replicas(ensemble_at(fragments, entry_id), entry_id, self.metadata.write_quorum)

    async def _read_entry(self, entry_id: int, *, need_copy: bool = False) -> bytes | None:
        """A recovery read: the entry if recoverable, None if unrecoverable; else RecoveryError.

        Reads the write set where the writer put the entry (the metadata recovery started
        from), deciding as soon as the answers do.

        One function on purpose: the quorum rule (decide as soon as the answers allow) is read
        and reviewed in one place, as BookKeeper's ReadLastConfirmed and recovery reads are.
        """
        qc = self.metadata.write_quorum - self.metadata.ack_quorum + 1
        verifies = self._digester.verifies
        asked = self._replicas(self.metadata.fragments, entry_id)
        copies: list[bytes] = []
        negatives = 0
        answered = 0

        def decided() -> bool:
            if verifies and copies:
                return True
            if not verifies and len(copies) >= 2 and len(set(copies)) > 1:
                return True  # copies disagree: unknown, whatever else comes
            if not need_copy and not copies and negatives >= qc:
                return True
            return answered == len(asked)

        def decide(bookie_id: str, r: ReadResponse | None) -> bool:
            nonlocal negatives, answered
            answered += 1
            if r is not None and r.status == Status.OK:
                try:
                    self._digester.decode(self.ledger_id, entry_id, r.data)
                    copies.append(bytes(r.data))
                except DigestMismatchError as e:
                    log.warning("recovery of ledger %d: %s on %s; ignoring that copy", self.ledger_id, e, bookie_id)
            elif r is not None and r.status in NEGATIVE:
                negatives += 1
            return decided()

        await ask_bookies(
            self._ctx.pool,
            asked,
            # A fencing read, as BookKeeper's recovery reads are (FLAG_DO_FENCING): a negative
            # counts only from a bookie fenced before it answered. Fencing stopped at EC
            # answers, so a bookie of this write set may not be fenced yet -- its fence
            # waiting on a key check, say, while a plain read is answered at once -- and one
            # that lacks the entry now could take it from the old writer a moment later (a
            # seed-3 fault run lost entries 8..63 of a BYPASS E3 W2 A2 ledger so).
            self._fencing_read(entry_id),
            decide,
        )
        if verifies and copies:
            return copies[0]
        if not verifies and copies:
            if len(copies) >= 2 and len(set(copies)) == 1:
                return copies[0]
            raise RecoveryError(
                f"ledger {self.ledger_id}: entry {entry_id} has {len(copies)} cop{'y' if len(copies) == 1 else 'ies'} "
                f"that cannot be verified without the ledger's password "
                f"({'they disagree' if len(set(copies)) > 1 else 'two agreeing copies are needed'}); "
                f"open the ledger with its password to recover it"
            )
        if not need_copy and negatives >= qc:
            return None
        raise RecoveryError(
            f"ledger {self.ledger_id}: entry {entry_id} is unknown (no valid copy, {negatives} explicit "
            f"negative(s) of {len(asked)}, {qc} needed to end the ledger there); retry when more bookies "
            f"are up or out of limbo"
        )

    async def _recover_from(self, lac: int) -> tuple[int, int]:
        """Read forward from LAC + 1, writing back what is recoverable; return (last, length).

        Entries are written back a batch at a time, concurrently (a recovery-add waits for
        a journal fsync; one fsync covers a whole batch); an entry that then lacks its ack
        quorum is written back again alone, replacing failed bookies.
        """
        length = await self._length_at(lac)
        entry_id = lac + 1
        while True:
            batch: list[tuple[int, bytes]] = []
            end_found = False
            while len(batch) < WRITE_BACK_BATCH:
                data = await self._read_entry(entry_id)
                if data is None:
                    end_found = True
                    break
                batch.append((entry_id, data))
                entry_id += 1
            if batch:
                _, length, _ = self._digester.decode(self.ledger_id, batch[-1][0], batch[-1][1])
                short: list[tuple[int, bytes]] = []
                async with anyio.create_task_group() as nursery:
                    for entry, data in batch:
                        nursery.start_soon(self._first_write_back, entry, data, short)
                for entry, data in sorted(short):
                    await self._write_back(entry, data, replace=True)
            if end_found:
                return entry_id - 1, length

    async def _length_at(self, entry_id: int) -> int:
        if entry_id < 0:
            return 0
        # A confirmed entry: any one valid copy tells the length.
        try:
            data = await self._read_entry(entry_id, need_copy=True)
        except RecoveryError as e:
            raise RecoveryError(
                f"ledger {self.ledger_id}: confirmed entry {entry_id} cannot be read ({e}); retry later"
            ) from None
        assert data is not None
        return self._digester.decode(self.ledger_id, entry_id, data)[1]

    async def _first_write_back(self, entry_id: int, data: bytes, short: list[tuple[int, bytes]]) -> None:
        """Write back without replacing anyone; an entry short of its ack quorum goes to ``short``."""
        if not await self._write_back(entry_id, data, replace=False):
            short.append((entry_id, data))

    async def _write_back(self, entry_id: int, data: bytes, *, replace: bool) -> bool:
        """Recovery-add the entry to its write set until A bookies hold it; with
        ``replace``, bookies that fail are replaced (from this entry on) when too few
        answer, else False says the ack quorum was not reached.

        One loop on purpose: the rule that ends it (A bookies hold the entry, or replacing the
        failed ones is allowed or not) is read and reviewed in one place.
        """
        a = self.metadata.ack_quorum
        acked: set[str] = set()
        original = set(ensemble_at(self.metadata.fragments, entry_id))
        while True:
            ensemble = ensemble_at(self.fragments, entry_id)
            write_to = self._replicas(self.fragments, entry_id)
            failed: set[str] = set()
            refused: BKError | None = None

            def decide(bookie_id: str, r: AddResponse | None) -> bool:
                nonlocal refused
                if r is not None and r.status == Status.OK and (bookie_id in original or bookie_id in self._fenced):
                    acked.add(bookie_id)
                elif r is not None and r.status == Status.UNAUTHORIZED:
                    refused = UnauthorizedError(f"{bookie_id}: wrong password for ledger {self.ledger_id}")
                    return True
                else:
                    failed.add(bookie_id)  # noqa: B023 - decide runs only within this iteration's ask_bookies
                # A acks decide, as a writer's add: a hung replica must not hold recovery up
                # by its connect or add timeout. The others still get the entry (send_late):
                # copies beyond A make the ledger safer, but nobody waits for them.
                return len(acked & set(write_to)) >= a  # noqa: B023 - as above

            await ask_bookies(
                self._ctx.pool,
                [b for b in write_to if b not in acked],
                lambda conn: conn.submit_add(
                    self.ledger_id,
                    entry_id,
                    data,
                    master_key=self._master_key,
                    ledger_type=self.type_id,
                    recovery=True,
                    timeout_s=self.settings.add_timeout_s,
                ),
                decide,
                send_late=True,
            )
            if refused is not None:
                raise refused
            if len(acked & set(write_to)) >= a:
                return True
            if not replace:
                return False
            if not failed:
                raise RecoveryError(f"ledger {self.ledger_id}: writing back entry {entry_id} got {len(acked)} acks, {a} needed")
            indices = [ensemble.index(b) for b in failed]
            try:
                new = await choose_replacements(
                    self._ctx.pool,
                    ensemble,
                    indices,
                    what=f"recovery of ledger {self.ledger_id}",
                    write_quorum=self.metadata.write_quorum,
                )
            except BKError as e:
                raise RecoveryError(
                    f"ledger {self.ledger_id}: writing back entry {entry_id} got {len(acked)} acks, {a} needed, "
                    f"and the failed bookies cannot be replaced ({e}); retry later"
                ) from None
            log.warning(
                "recovery of ledger %d: bookies %s failed writing back entry %d; replacing them with %s from there on",
                self.ledger_id,
                sorted(failed),
                entry_id,
                [new[i] for i in indices],
            )
            await self._fence_replacements([new[i] for i in indices])
            self.fragments = replace_from(self.fragments, entry_id, {i: new[i] for i in indices})

    async def _fence_replacements(self, bookies: list[str]) -> None:
        """Fence a replacement before it gets recovery adds, as the ledger's other bookies
        are: every bookie of the closed ledger then refuses ordinary adds. (The old writer
        never knew the replacement, but a fenced ledger should be fenced everywhere it is.)
        A replacement that cannot be fenced is left out of the ack count below."""

        def decide(bookie_id: str, r: ReadResponse | None) -> bool:
            if r is not None and r.status in (Status.OK, Status.NO_ENTRY, Status.UNKNOWN):
                self._fenced.add(bookie_id)
            return False

        await ask_bookies(
            self._ctx.pool,
            bookies,
            self._fencing_read(LAST_ENTRY),
            decide,
        )

    async def _close(self, last: int, length: int) -> LedgerMetadata:
        md = self.metadata
        started_from = self.metadata.fragments
        while True:
            if md.state != LedgerStateName.IN_RECOVERY or md.fragments != started_from:
                raise LedgerFencedError(f"ledger {self.ledger_id} changed during recovery (now {md.state.value}); open it again")
            # Recovery's own fragments past the end would hold nothing: leave them out.
            fragments = tuple(f for f in self.fragments if f in started_from or f[0] <= last)
            new = attrs.evolve(md, state=LedgerStateName.CLOSED, last_entry_id=last, length=length, fragments=fragments)
            try:
                closed = await self._ctx.metadata.update_ledger(new, md.version)
                log.info("recovered ledger %d: last entry %d", self.ledger_id, last)
                return closed
            except BadVersionError:
                md = await self._ctx.metadata.read_ledger(self.ledger_id)
                if md.closed:
                    return md  # a concurrent recovery won; its result is the ledger's end
