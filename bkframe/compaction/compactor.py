"""One compaction of a log by key (docs/compaction.md): what ``bkframe log compact`` runs.

1. Take the log's compaction lock (``compaction/<log>``): one compactor per log.
2. Settle what a killed run left: its staged ledgers either became segments (the swap was
   stored, the unstaging not) or go to the garbage.
3. The range: the closed segments before the head (the first open segment, or the first
   younger than ``min_compaction_lag_s``).
4. Pass 1 reads the range in position order (from the bookies or the tier) and indexes
   each keyed record's key and position (:class:`~bkframe.compaction.key_index.KeyIndex`,
   on disk beyond its memory budget).
5. Pass 2 reads each segment still on the bookies only (not offloaded) and keeps a record if
   it has no key or is its key's latest; a segment that loses records is written as a new
   ledger of the records kept, then their index (:mod:`bkframe.client.logs.compacted`),
   staged in the log record before its first entry.
6. Swaps, oldest segment first: each a compare-and-set of the record that holds the segment,
   only if the segment is still exactly as pass 1 read it (an offload, a trim or another
   compaction meanwhile leaves it as it is, and its new ledger goes to the garbage).
7. Unstage. A replaced ledger stays on the bookies, named by its segment's
   :class:`~bkframe.client.logs.model.Compacted`, for ``retire_lag_s`` (a reader that
   planned its read before the swap reads what it planned); the first run after that
   retires it to the garbage, which is deleted. A reader still on it then reads on from the
   compacted ledger: the same positions, less those dropped.

A tombstone (a key with an empty payload) is its key's latest record, so the key's older
values go; the tombstone itself goes in a later run, once it is in the clean part (a run
that rewrote every segment that lost records finished past it: nothing older of its key is
left anywhere), every cursor and subscription has passed it, and it is older than
``tombstone_retention_s``.
A segment's entry ids must be below 2**32 (positions are packed into 64 bits).
"""

from __future__ import annotations

import collections
import logging
import shutil
import struct
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import attrs
import numpy as np
import numpy.typing as npt
import trio

from bkframe.client.logs import compacted, envelope
from bkframe.client.logs.model import Compacted, CompactionDefaults, LogMetadata, Position, Segment, Staged
from bkframe.client.logs.reader import CHUNK, LogReader
from bkframe.client.logs.records import LogRecords
from bkframe.client.read_handle import EntryBlock
from bkframe.client.write_handle import PendingAppend
from bkframe.common.held_lock import release_quietly, while_held
from bkframe.compaction.key_index import KeyIndex
from bkframe.compaction.table import KeptPositions, pack
from bkframe.errors import BKError, CompactionError
from bkframe.tiering.offload_record import Offload
from bkframe.tiering.segment_cas import Change, change_segment

log = logging.getLogger("bkframe.compaction")

#: The staging token and group prefix of a compaction's ledgers. The group is
#: ``compaction:<segment>:<replaced ledger>``: what a later run needs to settle it.
STAGE_PREFIX = "compaction:"
#: Appends in flight while a compacted ledger is written.
WINDOW = 64
#: A segment's kept records up to this many bytes are held from pass 2 to the rewrite
#: (beyond it they are read again).
KEPT_BUFFER = 32 << 20
_HEAD = struct.Struct("<Bq")
_U32 = struct.Struct("<I")
#: The compaction lock's time to live (s): a killed compactor's lock goes after this.
LOCK_TTL_S = 30.0
#: How long a replaced ledger stays for the readers that opened it (s).
RETIRE_LAG_S = 600.0


@attrs.frozen
class CompactionResult:
    """What one compaction did."""

    log: str
    #: The head's first position: nothing from here on was looked at.
    end: Position
    segments_read: int
    #: Segments replaced by compacted ledgers.
    rewritten: tuple[int, ...]
    #: Segments that changed during the run (trimmed, offloaded, compacted by another
    #: run) and were left as they are.
    skipped: tuple[int, ...]
    records_read: int
    records_dropped: int
    bytes_read: int
    bytes_dropped: int
    #: Replaced ledgers of earlier runs deleted after their lag.
    retired: int
    #: Keys in the range with a live value, tombstones among its records, and tombstones
    #: dropped (docs/compaction.md, "Tombstones").
    keys: int
    tombstones: int
    tombstones_dropped: int
    seconds: float


@attrs.define
class _Rewrite:
    """A segment of pass 2 that loses records: its new ledger and what it keeps."""

    segment: Segment
    ledger_id: int
    #: Records kept, their bytes, and the index entries after them (filled as it is written).
    kept: int = attrs.field(default=0)
    kept_bytes: int = attrs.field(default=0)
    index_entries: int = attrs.field(default=0)
    #: A segment only in the tier: its new object (the ledger stays as it is, gone).
    offload: Offload | None = attrs.field(default=None)


@attrs.frozen
class _Records:
    """Records of one segment as pass 2 sees them, as arrays: their entry ids, which have a
    key, which are tombstones (keyed, empty), their timestamps (ms) and stored sizes."""

    ids: npt.NDArray[np.int64]
    keyed: npt.NDArray[np.bool_]
    tombstone: npt.NDArray[np.bool_]
    millis: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    #: The entries themselves, when read from the bookies.
    block: EntryBlock | None = None

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "tombstone", self.tombstone & self.keyed)


def _heads(block: EntryBlock) -> tuple[_Records, list[bytes]]:
    """What pass 1 and 2 need of a block of envelopes, read off their heads in place (no
    payload is copied): the records, and the keys of those that have one, in order."""
    data = memoryview(block.data)
    keys: list[bytes] = []
    n = len(block)
    keyed = np.zeros(n, dtype=bool)
    tomb = np.zeros(n, dtype=bool)
    millis = np.zeros(n, dtype=np.int64)
    starts, ends = block.starts.tolist(), block.ends.tolist()
    for i in range(n):
        start, end = starts[i], ends[i]
        if end - start < envelope.HEAD_SIZE:
            raise BKError(f"entry {int(block.entry_ids[i])} of ledger {block.ledger_id} is shorter than an envelope")
        flags, millis[i] = _HEAD.unpack_from(data, start)
        if flags & ~(envelope.KEY | envelope.EVENT_TIME):
            if flags & envelope.PROPERTIES:  # rare: the full decode finds where the payload starts
                payload, key, _, _, _ = envelope.decode(bytes(data[start:end]))
                if key is not None:
                    keyed[i], tomb[i] = True, not payload
                    keys.append(key)
                continue
            envelope.decode(bytes(data[start:end]))  # raises BadRecordError for flags it does not know
        if flags & envelope.KEY:
            (length,) = _U32.unpack_from(data, start + envelope.HEAD_SIZE)
            at = start + envelope.HEAD_SIZE + 4
            if at + length > end:
                raise BKError(f"entry {int(block.entry_ids[i])} of ledger {block.ledger_id}: its key runs past its end")
            keys.append(bytes(data[at : at + length]))
            keyed[i], tomb[i] = True, at + length == end
    return _Records(block.entry_ids, keyed, tomb, millis, block.ends - block.starts), keys


@attrs.define
class Compaction:
    """One run over one log; :func:`compact` makes and runs it."""

    records: LogRecords
    name: str
    password: bytes
    work_dir: Path
    memory_bytes: int
    now: float
    retire_lag_s: float
    defaults: CompactionDefaults
    token: str = attrs.Factory(lambda: STAGE_PREFIX + uuid.uuid4().hex)
    records_read: int = 0
    bytes_read: int = 0
    records_dropped: int = 0
    bytes_dropped: int = 0
    keys: int = 0
    tombstones: int = 0
    tombstones_dropped: int = 0
    #: Whether every segment that lost records was rewritten (then the log is clean up to
    #: this run's end: see LogMetadata.compacted_until).
    clean: bool = True
    #: Packed positions before which a tombstone may go, and its age's bound (set by run()).
    clean_before: np.uint64 = attrs.Factory(lambda: np.uint64(0))
    cursor_floor: np.uint64 = attrs.Factory(lambda: np.uint64(0))
    tombstone_cutoff_ms: int = 0

    async def run(self) -> CompactionResult:
        started = time.monotonic()
        record = await settle_staged(self.records, self.name)
        if record.settings.compaction != "key":
            raise CompactionError(
                f"log {self.name!r} has compaction {record.settings.compaction!r}: nothing to compact "
                f"(set it with: bkframe log configure {self.name} --compaction key)"
            )
        segments, end = await self._range(record)
        await self._tombstone_bounds(record)
        reader = LogReader(self.records, record, self.password)
        index_dir = self.work_dir / record.uid
        shutil.rmtree(index_dir, ignore_errors=True)  # what a killed run left
        index_dir.mkdir(parents=True)
        index = KeyIndex(index_dir, memory_bytes=self.memory_bytes)
        try:
            await self._index(reader, segments, index)
            kept = KeptPositions(await anyio.to_thread.run_sync(index.latest))
            rewrites = await self._rewrite(reader, record, segments, kept)
        finally:
            await anyio.to_thread.run_sync(index.close)
            shutil.rmtree(index_dir, ignore_errors=True)
        rewritten, skipped = await self._swap(record, rewrites)
        clean = end.segment if self.clean and not skipped else 0

        def ended(r: LogMetadata) -> LogMetadata:
            if r.compaction_end >= end.segment and r.compacted_until >= clean:
                return r
            return attrs.evolve(
                r, compaction_end=max(r.compaction_end, end.segment), compacted_until=max(r.compacted_until, clean)
            )

        await self.records.update(self.name, ended)
        retired = await retire_replaced(self.records, self.name, self.now - self.retire_lag_s)
        result = CompactionResult(
            self.name, end, len(segments), tuple(rewritten), tuple(skipped), self.records_read, self.records_dropped,
            self.bytes_read, self.bytes_dropped, retired, self.keys, self.tombstones, self.tombstones_dropped,
            time.monotonic() - started,
        )
        log.info(
            "log %r compacted up to %s: %d segment(s) read, %d rewritten, %d record(s) of %d dropped (%d bytes)",
            self.name, end, len(segments), len(rewritten), self.records_dropped, self.records_read, self.bytes_dropped,
        )
        return result

    async def _tombstone_bounds(self, record: LogMetadata) -> None:
        """Where tombstones may be dropped: before the clean part's end, before every
        cursor and subscription that still holds the log (an expired one does not, as for
        retention), and older than ``tombstone_retention_s``."""
        self.clean_before = np.uint64(record.compacted_until << 32)
        holding = [c.position for c in await self.records.cursors(self.name) if not c.expired(record.settings, self.now)]
        floor = min(holding, default=Position(record.next_segment, 0))
        self.cursor_floor = np.uint64(floor.segment << 32 | floor.entry_id)
        self.tombstone_cutoff_ms = int((self.now - self.defaults.tombstones_s(record.settings)) * 1000)

    async def _range(self, record: LogMetadata) -> tuple[list[Segment], Position]:
        """The closed segments before the head, and the head's first position."""
        lag = self.defaults.lag_s(record.settings)
        out: list[Segment] = []
        for seg in await self.records.segments(record, record.start.segment):
            if not seg.closed or seg.aged_at() > self.now - lag:
                return out, Position(seg.number, 0)
            out.append(seg)
        return out, Position(record.next_segment, 0)

    async def _index(self, reader: LogReader, segments: list[Segment], index: KeyIndex) -> None:
        """Pass 1: every keyed record's key and position, in position order."""
        for seg in segments:
            if not seg.enveloped or seg.last_entry_id < 0:
                continue
            for lo in range(0, seg.last_entry_id + 1, CHUNK):
                got, keys = await self._records_of(reader, seg, lo, min(lo + CHUNK - 1, seg.last_entry_id))
                self.tombstones += int(got.tombstone.sum())
                if keys:
                    await anyio.to_thread.run_sync(index.add, keys, pack(seg.number, got.ids[got.keyed]))

    async def _rewrite(
        self, reader: LogReader, record: LogMetadata, segments: list[Segment], latest: KeptPositions
    ) -> list[_Rewrite]:
        """Pass 2: the segments on the bookies that lose records, each written anew."""
        out: list[_Rewrite] = []
        kept_keys = 0
        for seg in segments:
            if not seg.enveloped or seg.last_entry_id < 0:
                continue
            # One flag per position (a byte each): which records of the segment stay.
            keep = np.zeros(seg.last_entry_id + 1, dtype=bool)
            sizes = np.zeros(seg.last_entry_id + 1, dtype=np.int64)
            held = np.zeros(seg.last_entry_id + 1, dtype=bool)
            # The records kept, while they fit KEPT_BUFFER: then the rewrite need not read them again.
            buffered: list[tuple[int, bytes]] | None = []
            buffered_bytes = 0
            for lo in range(0, seg.last_entry_id + 1, CHUNK):
                got, _ = await self._records_of(reader, seg, lo, min(lo + CHUNK - 1, seg.last_entry_id))
                positions = pack(seg.number, got.ids)
                last = await anyio.to_thread.run_sync(latest.mask, positions)
                # A tombstone goes once nothing older of its key is left (a clean compaction
                # passed it), every cursor has passed it, and it is older than its retention.
                gone = (
                    got.keyed & last & got.tombstone & (positions < self.clean_before)
                    & (positions < self.cursor_floor) & (got.millis <= self.tombstone_cutoff_ms)
                )
                self.tombstones_dropped += int(gone.sum())
                kept_keys += int((got.keyed & last & ~got.tombstone).sum())
                kept_here = ~got.keyed | (last & ~gone)
                keep[got.ids], sizes[got.ids], held[got.ids] = kept_here, got.sizes, True
                if buffered is not None and got.block is not None and seg.offload is None:
                    buffered_bytes += int(got.sizes[kept_here].sum())
                    if buffered_bytes > KEPT_BUFFER:
                        buffered = None
                    else:
                        payloads = got.block.payloads()
                        buffered.extend((int(got.ids[i]), payloads[i]) for i in np.flatnonzero(kept_here).tolist())
            self.records_read += int(held.sum())
            self.bytes_read += int(sizes.sum())
            dropped = held & ~keep
            if not dropped.any():
                continue
            if seg.offload is not None and seg.offload.on_bookies:
                # Offloaded, its ledger kept for the deletion lag: a tier read that fails reads
                # the ledger, which must hold what the object holds. Compacted once it is gone.
                self.clean = False
                continue
            self.records_dropped += int(dropped.sum())
            self.bytes_dropped += int(sizes[dropped].sum())
            if seg.offload is not None:
                out.append(await self._rewrite_object(record, seg, keep & held))
            else:
                out.append(await self._write(reader, record, seg, keep, buffered))
        self.keys = kept_keys
        return out

    @staticmethod
    async def _records_of(reader: LogReader, seg: Segment, first: int, last: int) -> tuple[_Records, list[bytes]]:
        """What pass 1 and 2 need of the records ``first..last`` of ``seg``, and their keys."""
        if seg.offload is not None:  # read where readers read it (the tier, or the bookies)
            entries = await reader.read_segment(seg.number, first, last)
            records = _Records(
                np.array([e.position.entry_id for e in entries], dtype=np.int64),
                np.array([e.key is not None for e in entries], dtype=bool),
                np.array([not e.payload for e in entries], dtype=bool),
                np.array([e.timestamp or 0 for e in entries], dtype=np.int64),
                np.array([len(e.payload) for e in entries], dtype=np.int64),
            )
            return records, [e.key for e in entries if e.key is not None]
        block = await reader.read_block(seg, first, last)
        records, keys = _heads(block)
        return attrs.evolve(records, block=block), keys

    async def _write(
        self, reader: LogReader, record: LogMetadata, seg: Segment, keep: np.ndarray,
        buffered: list[tuple[int, bytes]] | None,
    ) -> _Rewrite:
        """The compacted ledger of ``seg``: staged, then the records ``keep`` flags (those
        ``buffered``, or read again when they did not fit in memory) and their index."""
        s = record.settings
        writer = await self.records.ledgers.create_ledger(
            ensemble=s.ensemble, write_quorum=s.write_quorum, ack_quorum=s.ack_quorum, ledger_type=s.ledger_type,
            digest=s.digest, password=self.password,
            custom={"bkframe.log": self.name, "bkframe.compacted": str(seg.number), **envelope.ENVELOPE_CUSTOM},
        )
        rewrite = _Rewrite(seg, writer.ledger_id)
        staged = Staged(writer.ledger_id, self.token, f"{STAGE_PREFIX}{seg.number}:{seg.ledger_id}")
        await self.records.update(self.name, lambda r: attrs.evolve(r, staged=(*r.staged, staged)))
        kept_ids: list[int] = []
        pending: collections.deque[PendingAppend] = collections.deque()
        try:
            async for entry_id, data in _kept_records(reader, seg, keep, buffered):
                kept_ids.append(entry_id)
                rewrite.kept_bytes += len(data)
                pending.append(writer.append_async(data))
                if len(pending) >= WINDOW:
                    await pending.popleft().wait()
            pieces = compacted.encode_index(np.asarray(kept_ids, dtype=np.int64))
            pending.extend(writer.append_async(piece) for piece in pieces)
            for p in pending:
                await p.wait()
            await writer.close()
        except BaseException:
            with trio.CancelScope(shield=True):
                await _close_quietly(writer)
            raise
        rewrite.kept = len(kept_ids)
        rewrite.index_entries = len(pieces)
        return rewrite

    async def _rewrite_object(self, record: LogMetadata, seg: Segment, keep: np.ndarray) -> _Rewrite:
        """A new object of the records ``keep`` flags, from the segment's object (only in the
        tier), under the key of the next compaction generation; verified, not recorded yet.
        If the run dies before its swap, the object is an orphan the tier's sweep deletes."""
        import pyarrow as pa

        from bkframe.client.read_handle import Entry, EntryBlock
        from bkframe.tiering.keys import parse_segment_key
        from bkframe.tiering.object_format import FLAGS, entry_parts
        from bkframe.tiering.segment_reader import AsyncSegmentObjectReader, connector_columns
        from bkframe.tiering.segment_writer import write_kept_object
        from bkframe.tiering.verify import verify_object

        o = seg.offload
        assert o is not None
        tier = await self.records.ledgers.context.tiers.get(o.tier)
        source = AsyncSegmentObjectReader(tier, o.key, size=o.size, footer_crc32c=o.footer_crc32c)
        parsed = parse_segment_key(o.key)
        generation = (parsed.generation if parsed is not None else 0) + 1
        rewrite = _Rewrite(seg, seg.ledger_id, kept=int(keep.sum()))

        async def blocks() -> AsyncIterator[EntryBlock]:
            async for batch in source.batches(0, seg.last_entry_id, [*connector_columns(), FLAGS]):
                mask = keep[batch.column("entry_id").to_numpy()]
                if not mask.any():
                    continue
                entries = [
                    Entry(seg.ledger_id, entry_id, b"".join(parts))
                    for entry_id, parts in entry_parts(batch.filter(pa.array(mask)))
                ]
                rewrite.kept_bytes += sum(len(e.payload) for e in entries)
                yield EntryBlock.of(seg.ledger_id, entries)

        summary = await write_kept_object(
            blocks(), tier, log=self.name, log_uid=record.uid, segment=seg, rows=rewrite.kept, generation=generation,
            spool_dir=self.work_dir,
        )
        await verify_object(
            tier, summary.key, summary.content, size=summary.size, object_crc32c=summary.object_crc32c,
            footer_crc32c=summary.footer_crc32c,
        )
        rewrite.offload = attrs.evolve(
            o, key=summary.key, size=summary.size, entries=summary.entries, checksum=summary.checksum,
            object_crc32c=summary.object_crc32c, footer_crc32c=summary.footer_crc32c, offloaded_at=self.now,
        )
        return rewrite

    async def _swap(self, record: LogMetadata, rewrites: list[_Rewrite]) -> tuple[list[int], list[int]]:
        """Each rewritten segment replaced by its compacted ledger, oldest first; then the
        run's staged ledgers unstaged (the replaced ones, or the unused new ones, to the
        garbage)."""
        swapped: list[_Rewrite] = []
        skipped: list[int] = []
        for rw in rewrites:
            seg = rw.segment
            if rw.offload is not None:  # in the tier: the segment names the new object
                new = attrs.evolve(seg, offload=rw.offload, length=rw.kept_bytes)
                stored = await change_segment(
                    self.records, self.name, record.uid, seg.number, seg.ledger_id, _if_unchanged(seg, new)
                )
                if stored is not None and stored.offload == rw.offload:
                    swapped.append(rw)
                else:
                    skipped.append(seg.number)
                continue
            generation = seg.compacted.generation + 1 if seg.compacted is not None else 1
            # A segment compacted again whose first replaced ledger is not retired yet:
            # that one goes now (readers of it read on from the new ledger).
            new = attrs.evolve(
                seg, ledger_id=rw.ledger_id, length=rw.kept_bytes,
                compacted=Compacted(rw.kept, rw.index_entries, generation, self.now, replaced=seg.ledger_id),
            )
            stored = await change_segment(
                self.records, self.name, record.uid, seg.number, seg.ledger_id,
                _if_unchanged(seg, new),
            )
            if stored is not None and stored.ledger_id == rw.ledger_id:
                swapped.append(rw)
            else:
                skipped.append(seg.number)
        kept = [rw.ledger_id for rw in swapped if rw.offload is None]
        older = [
            rw.segment.compacted.replaced for rw in swapped if rw.offload is None and rw.segment.compacted is not None
        ]
        await self.records.update(
            self.name,
            lambda r: r.unstage(token=self.token, keep=kept).with_garbage(i for i in older if i >= 0)
            if any(s.token == self.token for s in r.staged) else r,
        )
        return [rw.segment.number for rw in swapped], skipped


async def _kept_records(
    reader: LogReader, seg: Segment, keep: np.ndarray, buffered: list[tuple[int, bytes]] | None
) -> AsyncIterator[tuple[int, bytes]]:
    """The records of ``seg`` that ``keep`` flags, as (entry id, stored bytes), in order."""
    if buffered is not None:
        for item in buffered:
            yield item
        return
    for lo in range(0, seg.last_entry_id + 1, CHUNK):
        block = await reader.read_block(seg, lo, min(lo + CHUNK - 1, seg.last_entry_id))
        for entry_id, data in zip(block.entry_ids.tolist(), block.payloads()):
            if keep[entry_id]:
                yield entry_id, data


def _if_unchanged(read: Segment, new: Segment) -> Change:
    """The swap: ``new`` over the segment only if it is still exactly as pass 1 read it."""
    return lambda current: new if current == read else None


async def _close_quietly(writer: object) -> None:
    try:
        with trio.move_on_after(10):
            await writer.close()  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 - the ledger stays staged: the next run settles it
        log.warning("closing a compacted ledger failed: %s", e)


async def settle_staged(records: LogRecords, name: str) -> LogMetadata:
    """Settle the ledgers killed compactions staged: one the log's segment names now
    became that segment (its swap was stored, its unstaging not); any other goes to the
    garbage. Returns the record as stored."""
    record = await records.read(name)
    leftovers = [s for s in record.staged if s.token.startswith(STAGE_PREFIX)]
    if not leftovers:
        return record
    records.forget_chunks(record.uid)
    became: list[int] = []
    for s in leftovers:
        try:
            number = int(s.group.split(":")[1])
        except (ValueError, IndexError):
            raise BKError(f"log {name!r}: staged ledger {s.ledger_id} has a malformed group {s.group!r}") from None
        seg = await records.segment(record, number)
        if seg is not None and seg.ledger_id == s.ledger_id:
            became.append(s.ledger_id)
    tokens = {s.token for s in leftovers}

    def settle(r: LogMetadata) -> LogMetadata:
        out = r
        for token in tokens:
            out = out.unstage(token=token, keep=became)
        return out

    record = await records.update(name, settle)
    log.info("log %r: settled %d ledger(s) a killed compaction staged", name, len(leftovers))
    return await records.collect_garbage(name)


async def retire_replaced(records: LogRecords, name: str, before: float) -> int:
    """Delete the ledgers compactions replaced before ``before`` (s since the epoch): each
    goes to the log's garbage, then its segment stops naming it, then the garbage is
    deleted. Returns how many were retired."""
    record = await records.read(name)
    records.forget_chunks(record.uid)
    due = [
        s for s in await records.segments(record, record.start.segment)
        if s.compacted is not None and s.compacted.replaced >= 0 and s.compacted.compacted_at <= before
    ]
    if not due:
        return 0
    await records.update(name, lambda r: r.with_garbage(s.compacted.replaced for s in due if s.compacted is not None))

    def retired(current: Segment) -> Segment | None:
        if current.compacted is None or current.compacted.replaced < 0:
            return None
        return attrs.evolve(current, compacted=attrs.evolve(current.compacted, replaced=-1))

    for seg in due:
        await change_segment(records, name, record.uid, seg.number, seg.ledger_id, retired)
    await records.collect_garbage(name)
    return len(due)


async def compact(
    records: LogRecords, name: str, *, password: bytes, work_dir: Path, memory_bytes: int = 64 << 20,
    holder: str = "", now: float | None = None, retire_lag_s: float = RETIRE_LAG_S, lock_ttl_s: float = LOCK_TTL_S,
    defaults: CompactionDefaults | None = None,
) -> CompactionResult:
    """Compact the log ``name`` once (see the module), holding its compaction lock;
    :class:`CompactionError` if another compactor holds it (or the lock is lost meanwhile:
    the run stops where it is, which leaves the log as a killed run does)."""
    store = records.store
    lock_name = f"compaction/{name}"
    outcome: list[CompactionResult | None] = []
    error: list[Exception] = []

    async def work() -> CompactionResult:
        records.check_password(await records.read(name), password)
        when = time.time() if now is None else now
        run = Compaction(
            records, name, password, work_dir, memory_bytes, when, retire_lag_s, defaults or CompactionDefaults()
        )
        return await run.run()

    async with trio.open_nursery() as nursery:  # the lock's keep-alive
        try:
            lock = await store.try_lock(lock_name, holder or f"compactor-{uuid.uuid4().hex[:8]}", lock_ttl_s, nursery)
            if lock is None:
                holder_now = await store.lock_holder(lock_name)
                raise CompactionError(f"log {name!r} is being compacted by {holder_now or 'another compactor'}; try later")
            try:
                outcome.append(await while_held(lock, work, log, f"log {name!r}: lost the compaction lock; stopping"))
            finally:
                with trio.CancelScope(shield=True):
                    await release_quietly(lock, 10.0, log, f"the compaction lock of log {name!r}")
        except Exception as e:  # noqa: BLE001 - raised below, outside the nursery (not in a group)
            error.append(e)
        finally:
            nursery.cancel_scope.cancel()
    if error:
        raise error[0]
    if not outcome or outcome[0] is None:
        raise CompactionError(f"log {name!r}: the compaction lost its lock and stopped; run it again")
    return outcome[0]
