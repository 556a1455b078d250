"""Reading a ledger: ranges up to LAC with replica failover, LAC reads, tailing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

import anyio
import attrs
import numpy as np
import numpy.typing as npt

from bkframe.client.bookies.connection import BookieClient
from bkframe.client.bookies.errors import error_for
from bkframe.client.bookies.pending_response import PendingResponse
from bkframe.client.distribution import replicas
from bkframe.client.entry_format import Digester, DigestMismatchError
from bkframe.client.ledger_access import LedgerAccess
from bkframe.client.quorum import Coverage, ask_bookies
from bkframe.core.metadata import LedgerMetadata
from bkframe.errors import BKError, NoSuchEntryError
from bkframe.proto.codes import Status
from bkframe.proto.ops.read import ReadResponse
from bkframe.proto.ops.read_lac import ReadLacResponse

if TYPE_CHECKING:
    from bkframe.client.context import ClientContext


#: READ_BATCH requests: entries and bytes per request, and requests at once per range read.
BATCH_ENTRIES = 256
BATCH_BYTES = 1 << 20
BATCHES_IN_FLIGHT = 8
#: Longest pause after a round of long polls that all ended early with nothing new.
POLL_PAUSE_S = 0.25


@attrs.frozen
class Entry:
    ledger_id: int
    entry_id: int
    payload: bytes


@attrs.frozen(eq=False)
class EntryBlock:
    """Consecutive entries of one ledger in one buffer: the payload of entry
    ``entry_ids[i]`` is ``data[starts[i]:ends[i]]``. What :meth:`ReadHandle.read_block`
    returns: a range read as arrays, with no object per entry (the Spark connector builds
    its Arrow columns from it directly)."""

    ledger_id: int
    entry_ids: npt.NDArray[np.int64]
    data: bytes
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.entry_ids)

    def payloads(self) -> list[bytes]:
        data = self.data
        return [data[s:e] for s, e in zip(self.starts.tolist(), self.ends.tolist())]

    def entries(self) -> list[Entry]:
        lid = self.ledger_id
        return [Entry(lid, i, p) for i, p in zip(self.entry_ids.tolist(), self.payloads())]

    @classmethod
    def of(cls, ledger_id: int, entries: list[Entry]) -> EntryBlock:
        lengths = np.fromiter((len(e.payload) for e in entries), dtype=np.int64, count=len(entries))
        ends = np.cumsum(lengths)
        ids = np.fromiter((e.entry_id for e in entries), dtype=np.int64, count=len(entries))
        return cls(ledger_id, ids, b"".join(e.payload for e in entries), ends - lengths, ends)

    @classmethod
    def join(cls, ledger_id: int, pieces: list[_Piece]) -> EntryBlock:
        """One block of ``pieces`` (each over a buffer of its own), in entry id order."""
        pieces = [piece for piece in pieces if len(piece.ids)]
        if len(pieces) == 1 and isinstance(pieces[0].data, bytes):
            return cls(ledger_id, pieces[0].ids, pieces[0].data, pieces[0].starts, pieces[0].ends)
        # Only the parts of each buffer that the entries span are copied.
        datas: list[bytes | memoryview] = []
        starts, ends, ids = [], [], []
        at = 0
        for piece in pieces:
            lo, hi = int(piece.starts.min()), int(piece.ends.max())
            datas.append(piece.data[lo:hi])
            starts.append(piece.starts - lo + at)
            ends.append(piece.ends - lo + at)
            ids.append(piece.ids)
            at += hi - lo
        if not ids:
            empty = np.empty(0, dtype=np.int64)
            return cls(ledger_id, empty, b"", empty, empty)
        all_ids = np.concatenate(ids)
        all_starts, all_ends = np.concatenate(starts), np.concatenate(ends)
        if len(all_ids) > 1 and (np.diff(all_ids) <= 0).any():
            order = np.argsort(all_ids, kind="stable")
            all_ids, all_starts, all_ends = all_ids[order], all_starts[order], all_ends[order]
        return cls(ledger_id, all_ids, b"".join(datas), all_starts, all_ends)


@attrs.frozen(eq=False)
class _Piece:
    """Entries of one READ_BATCH answer, of reads one by one, or a chunk's block: payload
    ``i`` is ``data[starts[i]:ends[i]]``."""

    ids: npt.NDArray[np.int64]
    data: bytes | memoryview
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]

    @classmethod
    def of(cls, ledger_id: int, entries: list[Entry]) -> _Piece:
        block = EntryBlock.of(ledger_id, entries)
        return cls(block.entry_ids, block.data, block.starts, block.ends)


@attrs.define(eq=False)
class _EntryRead:
    """One entry's read in progress: its replicas in the order to ask them."""

    entry_id: int
    replicas: list[str]
    #: Index of the next replica to ask.
    next: int = 0
    #: Requests sent and not yet answered or given up on.
    active: list[tuple[str, PendingResponse]] = attrs.Factory(list)
    errors: list[str] = attrs.Factory(list)


async def _wait_any(pendings: list[PendingResponse], timeout_s: float | None) -> bool:
    """Wait until one of ``pendings`` is done (True) or ``timeout_s`` passes (False)."""
    if any(pr.done() for pr in pendings):
        return True
    event = anyio.Event()
    for pr in pendings:
        pr.callback = lambda response, error: event.set()
    try:
        with anyio.move_on_after(timeout_s if timeout_s is not None else float("inf")):
            await event.wait()
            return True
        return False
    finally:
        for pr in pendings:
            pr.callback = None


class ReadHandle(LedgerAccess):
    """Made by :meth:`Client.open_ledger`; any number may read a ledger."""

    def __init__(self, ctx: ClientContext, metadata: LedgerMetadata, master_key: bytes, digester: Digester) -> None:
        super().__init__(ctx, metadata, master_key, digester)
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
        return (await self.read_block(first, last)).entries()

    async def read_block(self, first: int, last: int) -> EntryBlock:
        """:meth:`read` as one :class:`EntryBlock`: the same entries, checked the same way,
        without an object per entry."""
        if last > self._lac and not self.closed:
            await self.read_lac()
        if last > self._lac:
            raise NoSuchEntryError(f"ledger {self.ledger_id}: entry {last} is beyond the last confirmed entry {self._lac}")
        return await self._read_range(first, last)

    async def read_unconfirmed(self, first: int, last: int) -> list[Entry]:
        """Entries up to ``last`` even beyond the LAC (no guarantee they stay readable)."""
        return (await self._read_range(first, last)).entries()

    async def _read_range(self, first: int, last: int) -> EntryBlock:
        if first < 0 or last < first:
            raise ValueError(f"bad entry range {first}..{last}")
        try:
            return await self._read_range_once(first, last)
        except NoSuchEntryError:
            raise
        except BKError:
            # The ensemble may have changed under us (a writer replaced a bookie): read
            # the metadata again and retry once with the new fragments.
            before = self.metadata.fragments
            await self.refresh()
            if self.metadata.fragments == before:
                raise
            return await self._read_range_once(first, last)

    async def _read_range_once(self, first: int, last: int) -> EntryBlock:
        if last - first < 2:
            return EntryBlock.of(self.ledger_id, await self._read_entries(range(first, last + 1)))
        return await self._read_batched(first, last)

    async def _read_batched(self, first: int, last: int) -> EntryBlock:
        """The range in chunks of READ_BATCH requests, several at once; what a chunk's
        batches do not bring is read entry by entry (every failure case has its precise
        handling there)."""
        chunks: list[tuple[int, int]] = []
        boundaries = [f for f, _ in self.metadata.fragments if first < f <= last]
        lo = first
        for stop in [*boundaries, last + 1]:
            chunks.extend((c, min(c + BATCH_ENTRIES - 1, stop - 1)) for c in range(lo, stop, BATCH_ENTRIES))
            lo = stop
        results: list[EntryBlock | None] = [None for _ in chunks]
        errors: list[BaseException] = []
        limiter = anyio.Semaphore(BATCHES_IN_FLIGHT)

        async def run(i: int, lo: int, hi: int) -> None:
            async with limiter:
                try:
                    results[i] = await self._read_chunk(i, lo, hi)
                except BKError as e:
                    errors.append(e)

        async with anyio.create_task_group() as nursery:
            for i, (lo, hi) in enumerate(chunks):
                nursery.start_soon(run, i, lo, hi)
        if errors:
            raise errors[0]
        blocks = [b for b in results if b is not None]
        if len(blocks) == 1:
            return blocks[0]
        return EntryBlock.join(self.ledger_id, [_Piece(b.entry_ids, b.data, b.starts, b.ends) for b in blocks])

    async def _read_chunk(self, i: int, lo: int, hi: int) -> EntryBlock:
        """Entries ``lo..hi`` (one fragment). Unstriped (E = W): one batch sequence from one
        replica, the replicas taken in turn by chunk. Striped: the entries whose write set
        starts at each ensemble index, every E-th, each from its healthiest holder."""
        e, w = self.metadata.ensemble_size, self.metadata.write_quorum
        got: list[_Piece] = []
        if e == w:
            await self._batch_sequence(lo, hi, 1, i, got)
        else:
            async with anyio.create_task_group() as nursery:
                for start in range(lo, min(lo + e, hi + 1)):
                    nursery.start_soon(self._batch_sequence, start, hi, e, 0, got)
        have = np.concatenate([piece.ids for piece in got]) if got else np.empty(0, dtype=np.int64)
        if len(have) < hi - lo + 1:
            # All at once: a dead holder of a striped ledger leaves every E-th entry.
            missing = np.setdiff1d(np.arange(lo, hi + 1, dtype=np.int64), have).tolist()
            got.append(_Piece.of(self.ledger_id, await self._read_entries(missing)))
        return EntryBlock.join(self.ledger_id, got)

    async def _batch_sequence(self, first: int, last: int, step: int, turn: int, got: list[_Piece]) -> None:
        """Entries ``first, first + step, ...`` up to ``last`` from one replica into ``got``,
        until it has them all or sends nothing more usable. Never raises: what it did not
        get is read entry by entry afterwards."""
        health = self._ctx.pool.health
        settings = self._ctx.settings
        candidates = health.healthy_first(self._replicas(first))
        healthy = [b for b in candidates if not health.quarantined(b)] or candidates
        bookie_id = healthy[turn % len(healthy)]
        # A batch answers well within the speculative read timeout; a replica slower than
        # that is left to the entry-by-entry path, which speculates.
        timeout_s = min(settings.speculative_read_timeout_s or settings.read_timeout_s, settings.read_timeout_s)
        nxt = first
        try:
            conn = None
            with anyio.move_on_after(timeout_s):  # a connect as slow as that: read entry by entry
                conn = await self._ctx.pool.get(bookie_id)
            while conn is not None and nxt <= last:
                response = await conn.submit_read_batch(
                    self.ledger_id,
                    nxt,
                    last,
                    step=step,
                    max_bytes=BATCH_BYTES,
                    master_key=self._master_key,
                    timeout_s=timeout_s,
                ).wait()
                batch = response.batch if response.status == Status.OK else None
                if batch is None:
                    return
                # The answer's entries as arrays: checked in bulk, cut without copies.
                sent = len(batch)
                expected = nxt + step * np.arange(sent, dtype=np.int64)
                usable = int(np.argmin(batch.entry_ids == expected)) if (batch.entry_ids != expected).any() else sent
                good, entry_lac = self._digester.verify_batch(
                    self.ledger_id, batch.data, batch.starts[:usable], batch.ends[:usable], expected[:usable]
                )
                if entry_lac > self._lac:
                    self._lac = entry_lac
                if good:
                    starts = batch.starts[:good] + self._digester.header_size
                    got.append(_Piece(expected[:good], batch.data, starts, batch.ends[:good]))
                    nxt += step * good
                if good < sent:
                    return  # nothing (more) usable from this replica
        except ConnectionError as err:
            health.failed(bookie_id, str(err))

    async def _read_entries(self, entry_ids: Iterable[int]) -> list[Entry]:
        # Ask each entry's preferred replica for all of them at once, then finish entry by
        # entry, failing over (and speculating) per entry.
        plans: list[_EntryRead] = []
        for entry_id in entry_ids:
            plan = _EntryRead(entry_id, self._ctx.pool.health.healthy_first(self._replicas(entry_id)))
            await self._launch_next(plan)
            plans.append(plan)
        slow: set[str] = set()
        out = []
        for i, plan in enumerate(plans):
            out.append(await self._finish_read(plan, slow))
            if slow:
                # A replica that let one entry wait will let the next ones wait too: ask
                # the next replica for every later entry still waiting on it, all at once.
                for later in plans[i + 1 :]:
                    active = later.active
                    if active and all(b in slow and not pr.done() for b, pr in active):
                        await self._launch_next(later)
        return out

    def _replicas(self, entry_id: int) -> list[str]:
        return replicas(self.metadata.ensemble_at(entry_id), entry_id, self.metadata.write_quorum)

    async def _launch_next(self, plan: _EntryRead) -> bool:
        """Send the entry's read to its next replica; False when none is left."""
        timeout_s = self._ctx.settings.read_timeout_s

        def read(conn: BookieClient) -> PendingResponse[ReadResponse]:
            return conn.submit_read(self.ledger_id, plan.entry_id, master_key=self._master_key, timeout_s=timeout_s)

        while plan.next < len(plan.replicas):
            bookie_id = plan.replicas[plan.next]
            plan.next += 1
            try:
                # Never waits for a connect: a bookie still being connected to answers
                # through the pool's relay, as slowly as it must, and speculation (or its
                # failure) moves on to the next replica meanwhile.
                pending = self._ctx.pool.request(bookie_id, read, ReadResponse, timeout_s=timeout_s)
            except ConnectionError as e:
                plan.errors.append(f"{bookie_id}: {e}")
                continue
            plan.active.append((bookie_id, pending))
            return True
        return False

    async def _finish_read(self, plan: _EntryRead, slow: set[str]) -> Entry:
        """Wait for a valid copy of the entry: errors move on to the next replica at once;
        an answer slower than ``speculative_read_timeout_s`` makes the next replica be asked
        too (the first valid answer wins)."""
        settings = self._ctx.settings
        health = self._ctx.pool.health
        entry_id = plan.entry_id
        negatives = 0
        while True:
            if not plan.active and not await self._launch_next(plan):
                break
            done = [(b, pr) for b, pr in plan.active if pr.done()]
            if not done:
                spec = settings.speculative_read_timeout_s
                can_speculate = spec > 0 and plan.next < len(plan.replicas)
                if await _wait_any([pr for _, pr in plan.active], spec if can_speculate else None):
                    continue
                for bookie_id, _ in plan.active:
                    slow.add(bookie_id)
                    health.failed(bookie_id, f"no answer to a read within {spec} s")
                await self._launch_next(plan)
                continue
            for bookie_id, pending in done:
                plan.active.remove((bookie_id, pending))
                try:
                    response = pending.result()
                except ConnectionError as e:
                    health.failed(bookie_id, str(e))
                    plan.errors.append(f"{bookie_id}: {e}")
                    continue
                if response.status != Status.OK:
                    negatives += response.status in (Status.NO_ENTRY, Status.NO_LEDGER)
                    plan.errors.append(f"{bookie_id}: {response.status.name}")
                    continue
                try:
                    entry_lac, _, payload = self._digester.decode(self.ledger_id, entry_id, response.data)
                except DigestMismatchError as e:
                    plan.errors.append(f"{bookie_id}: {e}")
                    continue
                # The writer's LAC piggybacked on the entry: everything up to it is confirmed.
                if entry_lac > self._lac:
                    self._lac = entry_lac
                return Entry(self.ledger_id, entry_id, payload)
        detail = "; ".join(plan.errors)
        if negatives == len(plan.replicas):
            raise NoSuchEntryError(f"entry {self.ledger_id}:{entry_id} is on none of its bookies ({detail})")
        raise BKError(f"entry {self.ledger_id}:{entry_id} could not be read from any replica ({detail})")

    async def read_lac(self, *, _retry: bool = True) -> int:
        """Ask the last fragment's bookies for their LAC (at once, each with the read
        timeout); the highest answer wins, as soon as the answers cover every write set
        (:func:`~.quorum.covered`: a hung bookie is not waited for). If none answers, the
        ledger's metadata is read again (the writer may have replaced them) and, if it
        changed, asked once more."""
        if self.closed:
            return self._lac
        last = Coverage(self.metadata)
        best = self._lac
        refused: BKError | None = None
        answered = 0

        def decide(bookie_id: str, response: ReadLacResponse | None) -> bool:
            nonlocal best, refused, answered
            if response is None:
                return False
            answered += 1
            if response.status == Status.OK:
                best = max(best, response.lac)
            elif response.status != Status.NO_LEDGER:
                refused = error_for(response.status, response.message, bookie_id, ledger_id=self.ledger_id)
                return True
            return last.heard(bookie_id)

        await ask_bookies(
            self._ctx.pool,
            last.ensemble,
            lambda conn: conn.submit_read_lac(self.ledger_id, timeout_s=self._ctx.settings.read_timeout_s),
            decide,
        )
        if refused is not None:
            raise refused
        self._lac = max(self._lac, best)
        if not answered and _retry:
            before = self.metadata.fragments
            await self.refresh()
            if not self.closed and self.metadata.fragments != before:
                return await self.read_lac(_retry=False)
        return self._lac

    async def refresh(self) -> LedgerMetadata:
        """Re-read metadata (a closed ledger's end, new fragments)."""
        self.metadata = await self._ctx.metadata.read_ledger(self.ledger_id)
        if self.metadata.closed:
            self._lac = self.metadata.last_entry_id
        return self.metadata

    async def wait_for_lac(self, previous: int, *, timeout_s: float = 1.0) -> int:
        """Long poll: return once some bookie's LAC passes ``previous``, or once bookies
        covering every write set said it has not (at the poll's end), or the timeout ends."""
        if self.closed:
            return self._lac
        last = Coverage(self.metadata)
        timeout_ms = int(timeout_s * 1000)
        best = self._lac
        started = anyio.current_time()

        def decide(bookie_id: str, response: ReadLacResponse | None) -> bool:
            nonlocal best
            if response is None or response.status not in (Status.OK, Status.NO_LEDGER):
                return False
            if response.status == Status.OK and response.lac > previous:
                best = max(best, response.lac)
                return True  # one answer is enough
            return last.heard(bookie_id)

        await ask_bookies(
            self._ctx.pool,
            last.ensemble,
            # A long poll keeps its own deadline: the poll time plus a read's.
            lambda conn: conn.submit_read_lac(
                self.ledger_id,
                previous_lac=previous,
                timeout_ms=timeout_ms,
                timeout_s=timeout_s + self._ctx.settings.read_timeout_s,
            ),
            decide,
        )
        if best <= previous:
            # Every poll ended early with nothing new (a bookie over its long-poll cap answers
            # at once, a dead one refuses): pause a little, so a tail does not spin.
            await anyio.sleep_until(min(started + timeout_s, anyio.current_time() + POLL_PAUSE_S))
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
                # Up to the LAC known now: reading may move it on (a retried read refreshes
                # the metadata, and a closed ledger's end comes with it), and what lies past
                # this end is read in the next round, never skipped.
                end = self._lac
                for first in range(next_entry, end + 1, 1000):
                    for entry in (await self._read_range(first, min(first + 999, end))).entries():
                        yield entry
                next_entry = end + 1
                continue
            if self.closed:
                return
            before = self._lac
            await self.wait_for_lac(next_entry - 1, timeout_s=poll_timeout_s)
            if self._lac == before:
                await self.refresh()  # a closed ledger's end comes from its metadata
