"""Reading a ledger: ranges up to LAC with replica failover, LAC reads, tailing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import attrs
import trio

from bkframe.core import protocol as p
from bkframe.core.bookie_client import PendingResponse
from bkframe.core.client_errors import BKError, NoSuchEntryError, error_for
from bkframe.core.entry_format import Digester, DigestMismatchError
from bkframe.core.metadata import LedgerMetadata
from bkframe.core.write_handle import write_set

if TYPE_CHECKING:
    from bkframe.core.client import Client


@attrs.frozen
class Entry:
    ledger_id: int
    entry_id: int
    payload: bytes


class ReadHandle:
    """Made by :meth:`Client.open_ledger`."""

    def __init__(self, client: Client, metadata: LedgerMetadata, master_key: bytes, digester: Digester) -> None:
        self._client = client
        self.metadata = metadata
        self.ledger_id = metadata.ledger_id
        self._master_key = master_key
        self._digester = digester
        self._lac = metadata.last_entry_id

    @property
    def lac(self) -> int:
        """The last entry known confirmed: the close point of a closed ledger."""
        return self._lac

    @property
    def closed(self) -> bool:
        return self.metadata.closed

    async def read(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` inclusive; ``last`` must not be beyond the LAC."""
        if last > self._lac and not self.closed:
            await self.read_lac()
        if last > self._lac:
            raise NoSuchEntryError(
                f"ledger {self.ledger_id}: entry {last} is beyond the last confirmed entry {self._lac}"
            )
        return await self._read_range(first, last)

    async def read_unconfirmed(self, first: int, last: int) -> list[Entry]:
        """Entries up to ``last`` even beyond the LAC (no guarantee they stay readable)."""
        return await self._read_range(first, last)

    async def _read_range(self, first: int, last: int) -> list[Entry]:
        if first < 0 or last < first:
            raise ValueError(f"bad entry range {first}..{last}")
        # Ask each entry's first replica for the whole range at once, then fail over per entry.
        firsts: list[tuple[int, PendingResponse | None]] = []
        for entry_id in range(first, last + 1):
            firsts.append((entry_id, await self._submit(entry_id, 0)))
        out = []
        for entry_id, pending in firsts:
            out.append(await self._finish_read(entry_id, pending))
        return out

    def _replicas(self, entry_id: int) -> list[str]:
        ensemble = self.metadata.ensemble_at(entry_id)
        return [ensemble[i] for i in write_set(entry_id, len(ensemble), self.metadata.write_quorum)]

    async def _submit(self, entry_id: int, replica: int) -> PendingResponse | None:
        bookie_id = self._replicas(entry_id)[replica]
        try:
            client = await self._client.pool.get(bookie_id)
            return client.submit_read(self.ledger_id, entry_id)
        except ConnectionError:
            return None

    async def _finish_read(self, entry_id: int, pending: PendingResponse | None) -> Entry:
        replicas = self._replicas(entry_id)
        errors: list[str] = []
        negatives = 0
        for i in range(len(replicas)):
            if i > 0:
                pending = await self._submit(entry_id, i)
            if pending is None:
                errors.append(f"{replicas[i]}: unreachable")
                continue
            try:
                response = await pending.wait()
            except ConnectionError as e:
                errors.append(f"{replicas[i]}: {e}")
                continue
            if response.status != p.Status.OK:
                negatives += response.status in (p.Status.NO_ENTRY, p.Status.NO_LEDGER)
                errors.append(f"{replicas[i]}: {response.status.name}")
                continue
            try:
                _, _, payload = self._digester.decode(self.ledger_id, entry_id, response.data)
            except DigestMismatchError as e:
                errors.append(f"{replicas[i]}: {e}")
                continue
            return Entry(self.ledger_id, entry_id, payload)
        detail = "; ".join(errors)
        if negatives == len(replicas):
            raise NoSuchEntryError(f"entry {self.ledger_id}:{entry_id} is on none of its bookies ({detail})")
        raise BKError(f"entry {self.ledger_id}:{entry_id} could not be read from any replica ({detail})")

    async def read_lac(self) -> int:
        """Ask the last fragment's bookies for their LAC; the highest answer wins."""
        if self.closed:
            return self._lac
        ensemble = self.metadata.fragments[-1][1]
        best = self._lac
        for bookie_id in ensemble:
            try:
                client = await self._client.pool.get(bookie_id)
                response = await client.read_lac(self.ledger_id)
            except ConnectionError:
                continue
            if response.status == p.Status.OK:
                best = max(best, response.lac)
            elif response.status != p.Status.NO_LEDGER:
                raise error_for(response.status, response.message, bookie_id)
        self._lac = best
        return best

    async def refresh(self) -> LedgerMetadata:
        """Re-read metadata (a closed ledger's end, new fragments)."""
        self.metadata = await self._client.metadata.read_ledger(self.ledger_id)
        if self.metadata.closed:
            self._lac = self.metadata.last_entry_id
        return self.metadata

    async def wait_for_lac(self, previous: int, *, timeout_s: float = 1.0) -> int:
        """Long poll: return once some bookie's LAC passes ``previous`` (or the timeout ends)."""
        if self.closed:
            return self._lac
        ensemble = self.metadata.fragments[-1][1]
        timeout_ms = int(timeout_s * 1000)
        best = self._lac
        async with trio.open_nursery() as nursery:

            async def poll(bookie_id: str) -> None:
                nonlocal best
                try:
                    client = await self._client.pool.get(bookie_id)
                    response = await client.read_lac(self.ledger_id, previous_lac=previous, timeout_ms=timeout_ms)
                except ConnectionError:
                    return
                if response.status == p.Status.OK and response.lac > previous:
                    best = max(best, response.lac)
                    nursery.cancel_scope.cancel()  # one answer is enough

            for bookie_id in ensemble:
                nursery.start_soon(poll, bookie_id)
        self._lac = max(self._lac, best)
        return self._lac

    async def tail(self, start: int = 0, *, poll_timeout_s: float = 1.0) -> AsyncIterator[Entry]:
        """Yield entries from ``start`` as they are confirmed, until the ledger is closed and read.

        Waits with long polls on the bookies (READ_LAC with LONG_POLL), so a quiet ledger
        costs one request per bookie per ``poll_timeout_s``.
        """
        next_entry = start
        while True:
            if next_entry <= self._lac:
                for first in range(next_entry, self._lac + 1, 1000):
                    for entry in await self._read_range(first, min(first + 999, self._lac)):
                        yield entry
                next_entry = self._lac + 1
                continue
            if self.closed:
                return
            before = self._lac
            await self.wait_for_lac(next_entry - 1, timeout_s=poll_timeout_s)
            if self._lac == before:
                await self.refresh()  # a closed ledger's end comes from its metadata
