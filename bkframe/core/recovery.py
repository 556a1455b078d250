"""Ledger recovery: fence, find the last entry, write it back, close with a CAS.

Quorum rules from BP-46 (seed ``BP-46-running-without-the-journal.txt``), with
E, W, A the ensemble size, write quorum and ack quorum:

* fencing (sent to the last fragment's ensemble) completes at EC = E - A + 1 positive
  responses; a fencing read never gives an explicit negative (it creates the ledger);
* a recovery read (sent to the entry's write set) is *unrecoverable* at QC = W - A + 1
  explicit negatives (NO_ENTRY / NO_LEDGER) and no valid copy; anything else without a
  valid copy is *unknown*, and unknown never truncates: recovery fails and may be retried.
  UNKNOWN (a bookie in limbo) and errors are never negatives.

One departure from the seed's table, which asks for A positives to call an entry
recoverable: one copy with a valid digest is enough, as in BookKeeper's recovery reads
(the seed's "read entry: positive on a single bookie"). Such a copy was written by the
writer, so keeping it never loses an acknowledged entry (at worst it keeps one that was
never acknowledged, which recovery may always do), and it is written back to the whole
write set. Demanding A copies would stall forever on an entry whose other replicas are
in limbo: their repair waits for the very recovery that waits for them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from bkframe.core import protocol as p
from bkframe.core.bookie_client import PendingResponse
from bkframe.core.client_errors import RecoveryError, UnauthorizedError
from bkframe.core.entry_format import Digester, DigestMismatchError
from bkframe.core.metadata import BadVersionError, LedgerMetadata, LedgerStateName
from bkframe.core.write_handle import write_set

if TYPE_CHECKING:
    from bkframe.core.client import Client

log = logging.getLogger("bkframe.recovery")

NEGATIVE = (p.Status.NO_ENTRY, p.Status.NO_LEDGER)


async def _gather(pendings: list[tuple[str, PendingResponse | None]]) -> list[tuple[str, p.Response | None]]:
    out: list[tuple[str, p.Response | None]] = []
    for bookie_id, pending in pendings:
        if pending is None:
            out.append((bookie_id, None))
            continue
        try:
            out.append((bookie_id, await pending.wait()))
        except ConnectionError:
            out.append((bookie_id, None))
    return out


class Recovery:
    def __init__(self, client: Client, metadata: LedgerMetadata, master_key: bytes, digester: Digester) -> None:
        self.client = client
        self.md = metadata
        self.ledger_id = metadata.ledger_id
        self.master_key = master_key
        self.digester = digester
        self.type_id = client.plugins.ledger_type(metadata.ledger_type).type_id

    async def _submit(self, bookie_id: str, entry_id: int, *, fence: bool) -> PendingResponse | None:
        try:
            client = await self.client.pool.get(bookie_id)
            return client.submit_read(self.ledger_id, entry_id, master_key=self.master_key if fence else b"", fence=fence)
        except ConnectionError:
            return None

    async def run(self) -> LedgerMetadata:
        md = await self._mark_in_recovery()
        if md.closed:
            return md
        lac = await self._fence()
        last, length = await self._recover_from(lac)
        return await self._close(last, length)

    async def _mark_in_recovery(self) -> LedgerMetadata:
        md = self.md
        while md.state == LedgerStateName.OPEN:
            try:
                md = await self.client.metadata.update_ledger(
                    attrs.evolve(md, state=LedgerStateName.IN_RECOVERY), md.version
                )
            except BadVersionError:
                md = await self.client.metadata.read_ledger(self.ledger_id)
        self.md = md
        return md

    async def _fence(self) -> int:
        """Fence the last fragment's bookies; return the highest LAC they know."""
        ensemble = self.md.fragments[-1][1]
        e, a = self.md.ensemble_size, self.md.ack_quorum
        ec = e - a + 1
        responses = await _gather([(b, await self._submit(b, p.LAST_ENTRY, fence=True)) for b in ensemble])
        positives = 0
        lac = -1
        for bookie_id, r in responses:
            if r is None:
                continue
            if r.status == p.Status.UNAUTHORIZED:
                raise UnauthorizedError(f"{bookie_id}: wrong password for ledger {self.ledger_id}")
            if r.status == p.Status.OK:
                positives += 1
                lac = max(lac, r.lac)
                try:
                    entry_lac, _, _ = self.digester.decode(self.ledger_id, r.entry_id, r.data)
                    lac = max(lac, entry_lac)
                except DigestMismatchError:
                    pass  # a corrupt last entry says nothing about the LAC; its fence still counts
            elif r.status == p.Status.NO_ENTRY:
                positives += 1
                lac = max(lac, r.lac)
        if positives < ec:
            raise RecoveryError(
                f"ledger {self.ledger_id}: only {positives} of {e} bookies acknowledged the fence, "
                f"{ec} (E - A + 1) are needed; retry when more bookies are up"
            )
        # Entries up to the LAC were confirmed; the fragment metadata may start earlier.
        return max(lac, self.md.last_entry_id)

    async def _probe(self, entry_id: int) -> tuple[list[bytes], int, int]:
        """Read an entry from its whole write set: (valid copies, explicit negatives, replicas)."""
        ensemble = self.md.ensemble_at(entry_id)
        replicas = [ensemble[i] for i in write_set(entry_id, len(ensemble), self.md.write_quorum)]
        responses = await _gather([(b, await self._submit(b, entry_id, fence=False)) for b in replicas])
        positives: list[bytes] = []
        negatives = 0
        for _, r in responses:
            if r is None:
                continue
            if r.status == p.Status.OK:
                try:
                    self.digester.decode(self.ledger_id, entry_id, r.data)
                except DigestMismatchError:
                    continue  # corrupt replica: unknown, neither positive nor negative
                positives.append(r.data)
            elif r.status in NEGATIVE:
                negatives += 1
        return positives, negatives, len(replicas)

    async def _read_entry(self, entry_id: int) -> bytes | None:
        """A recovery read: the entry if recoverable, None if unrecoverable; else RecoveryError."""
        qc = self.md.write_quorum - self.md.ack_quorum + 1
        positives, negatives, n = await self._probe(entry_id)
        if positives:
            return positives[0]
        if negatives >= qc:
            return None
        raise RecoveryError(
            f"ledger {self.ledger_id}: entry {entry_id} is unknown (no valid copy, {negatives} explicit "
            f"negative(s) of {n}, {qc} needed to end the ledger there); retry when more bookies are up "
            f"or out of limbo"
        )

    async def _recover_from(self, lac: int) -> tuple[int, int]:
        """Read forward from LAC + 1, writing back what is recoverable; return (last, length)."""
        length = await self._length_at(lac)
        entry_id = lac + 1
        while True:
            data = await self._read_entry(entry_id)
            if data is None:
                return entry_id - 1, length
            _, length, _ = self.digester.decode(self.ledger_id, entry_id, data)
            await self._write_back(entry_id, data)
            entry_id += 1

    async def _length_at(self, entry_id: int) -> int:
        if entry_id < 0:
            return 0
        # A confirmed entry: any one valid copy tells the length.
        positives, _, _ = await self._probe(entry_id)
        if not positives:
            raise RecoveryError(f"ledger {self.ledger_id}: confirmed entry {entry_id} cannot be read; retry later")
        return self.digester.decode(self.ledger_id, entry_id, positives[0])[1]

    async def _write_back(self, entry_id: int, data: bytes) -> None:
        """Recovery-add the entry to its whole write set; needs A acknowledgements."""
        ensemble = self.md.ensemble_at(entry_id)
        replicas = [ensemble[i] for i in write_set(entry_id, len(ensemble), self.md.write_quorum)]
        pendings: list[tuple[str, PendingResponse | None]] = []
        for b in replicas:
            try:
                client = await self.client.pool.get(b)
                pendings.append(
                    (b, client.submit_add(self.ledger_id, entry_id, data, master_key=self.master_key,
                                          ledger_type=self.type_id, recovery=True))
                )
            except ConnectionError:
                pendings.append((b, None))
        acks = sum(1 for _, r in await _gather(pendings) if r is not None and r.status == p.Status.OK)
        if acks < self.md.ack_quorum:
            raise RecoveryError(
                f"ledger {self.ledger_id}: writing back entry {entry_id} got {acks} acks, "
                f"{self.md.ack_quorum} needed; retry later"
            )

    async def _close(self, last: int, length: int) -> LedgerMetadata:
        md = self.md
        while True:
            new = attrs.evolve(md, state=LedgerStateName.CLOSED, last_entry_id=last, length=length)
            try:
                closed = await self.client.metadata.update_ledger(new, md.version)
                log.info("recovered ledger %d: last entry %d", self.ledger_id, last)
                return closed
            except BadVersionError:
                md = await self.client.metadata.read_ledger(self.ledger_id)
                if md.closed:
                    return md  # a concurrent recovery won; its result is the ledger's end

