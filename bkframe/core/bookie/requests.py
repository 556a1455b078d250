"""How a bookie answers requests: adds, reads, fences, LACs, syncs, write closes, entry
lists, info -- for one frame at a time, synchronously on the event loop.

``RequestHandler.handle`` turns a frame's requests into a :class:`ResponseBatch`: the encoded
responses plus the journal sequence that must be durable before they may be sent. It does
all its work synchronously on the event loop (page-cache writes, memory copies); the only
wait on the add path is the journal's group commit, which the connection's writer awaits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import trio

from bkframe.core import proto as p
from bkframe.core.bookie import journal_records as jr
from bkframe.core.bookie.batch_reads import read_batch
from bkframe.core.bookie.response_batch import ResponseBatch
from bkframe.core.bookie.write_once import journal_written_once
from bkframe.core.counters import Histogram
from bkframe.core.disk_full import is_disk_full
from bkframe.core.interfaces import Buffer, JournalWriteError, LedgerState, WriteOnceStorage

if TYPE_CHECKING:
    from bkframe.core.bookie.bookie import Bookie

log = logging.getLogger("bkframe.bookie")


class RequestHandler:
    """One bookie's request semantics (the network server is :mod:`.server`)."""

    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie
        self.journal = bookie.journal
        self.storage = bookie.storage
        self.counters = bookie.counters
        self.mode = bookie.mode
        self.tombstones = bookie.tombstones
        self.sync = bookie.sync
        self.types_by_id = bookie.types_by_id
        #: The storage, if it can write large PD entries once (and is configured to).
        self.write_once: WriteOnceStorage | None = (
            self.storage if isinstance(self.storage, WriteOnceStorage) and self.storage.large_entry_bytes > 0 else None
        )
        #: Journal sequence of each ledger's fence record, so a repeated fence waits for it.
        self._fence_seq: dict[int, int] = {}
        #: Long polls waiting for a ledger's LAC to move.
        self._lac_moved: dict[int, trio.Event] = {}

    def forget(self, ledger_id: int) -> None:
        """A deleted ledger: drop its fence sequence; its long polls answer NO_LEDGER."""
        self._fence_seq.pop(ledger_id, None)
        moved = self._lac_moved.pop(ledger_id, None)
        if moved is not None:
            moved.set()

    def handle(self, requests: Sequence[p.Request | p.BadMessage]) -> ResponseBatch:
        """Serve one frame's requests; never raises for bad input or a failing disk."""
        batch = ResponseBatch(requests=requests, received=trio.current_time())
        self.counters.requests += len(requests)
        i = 0
        n = len(requests)
        while i < n:
            req = requests[i]
            j = i + 1
            if type(req) is p.AddRequest:
                # Consecutive adds to one ledger are stored and journaled as one batch.
                while (
                    j < n and type(requests[j]) is p.AddRequest and requests[j].ledger_id == req.ledger_id  # type: ignore[union-attr]
                ):
                    j += 1
            try:
                self._serve(requests[i:j], batch)
            except Exception as e:
                # Storage failures are answered where they are expected (adds, reads); this
                # is the net under the rest (e.g. a full disk under a fence's new index):
                # the requests get IO_ERROR, the connection and the bookie go on.
                log.exception("serving %s failed", type(req).__name__)
                for r in requests[i:j]:
                    message = f"this bookie failed to serve the request: {e}"
                    batch.parts.append(p.encode_error_response(r.request_id, p.Status.IO_ERROR, message))
            i = j
        return batch

    def answered(self, batches: Sequence[ResponseBatch]) -> None:
        """The server sent these batches' answers: observe their request latencies."""
        now = trio.current_time()
        for b in batches:
            for histogram in b.timed:
                histogram.observe(now - b.received)

    def _timed(self, batch: ResponseBatch, by_type: dict[str, Histogram], ledger_type: int) -> None:
        policy = self.types_by_id.get(ledger_type)
        name = policy.name if policy is not None else str(ledger_type)
        histogram = by_type.get(name)
        if histogram is None:
            histogram = by_type[name] = Histogram()
        if histogram not in batch.timed:
            batch.timed.append(histogram)

    def _serve(self, requests: Sequence[p.Request | p.BadMessage], batch: ResponseBatch) -> None:
        """One request, or a run of adds to one ledger."""
        req = requests[0]
        if type(req) is p.AddRequest:
            if self._needs_key_check(req.ledger_id) and not _is_copy(req):
                batch.deferred.append(partial(self._add_after_key_check, requests))  # type: ignore[arg-type]
            else:
                self._add_run(requests, batch)  # type: ignore[arg-type]
        elif type(req) is p.ReadRequest:
            self._read(req, batch)
        elif type(req) is p.ReadBatchRequest:
            batch.parts.extend(read_batch(self.storage, self.counters, req))
            if (state := self.storage.ledger_state(req.ledger_id)) is not None:
                self._timed(batch, self.counters.read_latency, state.ledger_type)
        elif type(req) is p.ReadLacRequest:
            self._read_lac(req, batch)
        elif type(req) is p.AddBatchRequest:
            if self._needs_key_check(req.ledger_id) and not _is_copy(req):
                batch.deferred.append(partial(self._add_after_key_check, req))
            else:
                self._add_batch(req, batch)
        elif type(req) is p.SyncRequest:
            if self.storage.ledger_state(req.ledger_id) is None:
                batch.parts.append(
                    p.encode_sync_response(req.request_id, p.Status.NO_LEDGER, req.ledger_id, -1, "ledger not here")
                )
            else:
                batch.deferred.append(partial(self.sync_ledger, req))
        elif type(req) is p.WriteLacRequest:
            self._write_lac(req, batch)
        elif type(req) is p.ListEntriesRequest:
            self._list_entries(req, batch)
        elif type(req) is p.WriteCloseRequest:
            self._write_close(req, batch)
        elif type(req) is p.BookieInfoRequest:
            batch.parts.append(p.encode_bookie_info_response(req.request_id, self.bookie.info()))
        elif type(req) is p.AuthRequest:
            # The connection is authenticated already (the server's handshake did it, or the
            # provider requires none): a client may always send AUTH first.
            batch.parts.append(p.encode_auth_response(req.request_id, p.Status.OK, "authenticated"))
        else:
            assert isinstance(req, p.BadMessage)
            self.counters.bad_requests += 1
            batch.parts.append(p.encode_error_response(req.request_id, p.Status.BAD_REQUEST, req.reason))

    def _add_run(self, adds: Sequence[p.AddRequest], batch: ResponseBatch) -> None:
        first = adds[0]
        # Requests of one run may still disagree on key, type or recovery flag: then
        # serve them one by one (rare, only from odd clients).
        if len(adds) > 1 and any(
            a.master_key != first.master_key or a.ledger_type != first.ledger_type or a.recovery != first.recovery for a in adds
        ):
            for a in adds:
                self._add_run([a], batch)
            return
        status, message = self._store(
            first.ledger_id,
            first.master_key,
            first.ledger_type,
            first.recovery,
            max(a.lac for a in adds),
            [a.entry_id for a in adds],
            [a.data for a in adds],
            batch,
        )
        encode = p.encode_add_response
        las = self.sync.last_add_synced(first.ledger_id)
        batch.parts.extend(encode(a.request_id, status, a.ledger_id, a.entry_id, las, message) for a in adds)

    def _add_batch(self, req: p.AddBatchRequest, batch: ResponseBatch) -> None:
        status, message = self._store(
            req.ledger_id, req.master_key, req.ledger_type, req.recovery, req.lac, req.entry_ids, req.entries, batch
        )
        batch.parts.append(
            p.encode_add_batch_response(
                req.request_id, status, req.ledger_id, len(req.entry_ids), self.sync.last_add_synced(req.ledger_id), message
            )
        )

    async def sync_ledger(self, req: p.SyncRequest) -> bytes:
        """SYNC: make what this bookie holds of the ledger durable; answer LastAddSynced."""
        seq = self.sync.last_seq(req.ledger_id)
        try:
            if seq > self.journal.durable_seq or self.journal.is_lost(seq):
                await self.journal.wait_durable(seq)
        except JournalWriteError as e:
            self.bookie.journal_write_failed(e)
            return p.encode_sync_response(
                req.request_id,
                self.lost_status(),
                req.ledger_id,
                self.sync.last_add_synced(req.ledger_id),
                f"bookie {self.bookie.bookie_id}: entries of ledger {req.ledger_id} were not written to its journal ({e}); "
                f"they are not synced here",
            )
        return p.encode_sync_response(req.request_id, p.Status.OK, req.ledger_id, self.sync.last_add_synced(req.ledger_id))

    def lost_status(self) -> p.Status:
        """The status of a request whose journal record was lost."""
        return p.Status.READ_ONLY if self.mode.read_only else p.Status.IO_ERROR

    def lost_write_responses(self, batch: ResponseBatch, error: BaseException, what: str = "the journal write") -> list[Buffer]:
        """Answers for a frame whose journal records were lost (a write found no space).

        Whatever needed those records to be durable (adds, explicit LACs, fences) gets an
        error; nothing of it may be acknowledged. The rest of the frame (plain reads, LAC
        reads, info, ...) journals nothing and is served again. SYNC and long polls answer
        on their own.
        """
        self.bookie.journal_write_failed(error)
        status = self.lost_status()
        message = f"bookie {self.bookie.bookie_id}: {what} failed ({error}); nothing of this request is durable here"
        parts: list[Buffer] = []
        again: list[p.Request | p.BadMessage] = []
        for req in batch.requests:
            if type(req) is p.AddRequest:
                las = self.sync.last_add_synced(req.ledger_id)
                parts.append(p.encode_add_response(req.request_id, status, req.ledger_id, req.entry_id, las, message))
            elif type(req) is p.AddBatchRequest:
                las = self.sync.last_add_synced(req.ledger_id)
                parts.append(p.encode_add_batch_response(req.request_id, status, req.ledger_id, len(req.entry_ids), las, message))
            elif type(req) is p.WriteLacRequest:
                parts.append(p.encode_write_lac_response(req.request_id, status, req.ledger_id, -1, message))
            elif type(req) is p.ReadRequest and req.fence:
                parts.extend(
                    p.encode_read_response(req.request_id, p.Status.IO_ERROR, req.ledger_id, req.entry_id, -1, message.encode())
                )
            elif type(req) is p.SyncRequest or (type(req) is p.ReadLacRequest and req.previous_lac is not None):
                continue  # answered by their own task
            else:
                again.append(req)
        if again:
            parts.extend(self.handle(again).parts)
        return parts

    def _store(
        self,
        ledger_id: int,
        master_key: bytes,
        ledger_type: int,
        recovery: bool,
        lac: int,
        entry_ids: Sequence[int],
        datas: Sequence[Buffer],
        batch: ResponseBatch,
    ) -> tuple[p.Status, str]:
        """Store entries of one ledger (all or none); return the status for all of them."""
        storage = self.storage
        policy = self.types_by_id.get(ledger_type)
        if policy is None:
            return p.Status.BAD_REQUEST, (
                f"unknown ledger type id {ledger_type}; this bookie serves "
                + ", ".join(f"{t.name}={t.type_id}" for t in self.types_by_id.values())
            )
        if self.mode.read_only and not recovery:
            # As BookKeeper: recovery adds (its high-priority writes) still go through, so
            # that ledgers this bookie holds can be closed; they need little space.
            return p.Status.READ_ONLY, self._read_only_refusal("adds")
        state = storage.ledger_state(ledger_id)
        if state is None and ledger_id in self.tombstones:
            return p.Status.NO_LEDGER, (
                f"ledger {ledger_id} was deleted (this bookie garbage-collected it); it takes no more entries"
            )
        if state is None:
            try:
                state = storage.ensure_ledger(ledger_id, master_key, ledger_type)
            except Exception as e:  # noqa: BLE001 - e.g. no space for the ledger's index
                if is_disk_full(e):
                    return self._no_space(e, f"to store ledger {ledger_id}")
                return self._storage_failed(ledger_id, entry_ids, e)
            seq = self.journal.append(jr.master_record(ledger_id, ledger_type, master_key), ledger_id)
            batch.wait_seq = max(batch.wait_seq, seq)
        elif not state.master_key:
            if self.bookie.key_verifier is not None and not (recovery and not master_key):
                # Known only from a lost disk's protection, replayed entries or a keyless
                # fence: _add_after_key_check adopts a key once metadata vouches for it.
                return p.Status.UNAUTHORIZED, (
                    f"wrong master key for ledger {ledger_id}: it does not match the password hash in the ledger's metadata"
                )
            # No metadata store to check against (a standalone bookie): adopt this key. A
            # keyless copy (autorecovery, see _is_copy) adopts none: the ledger stays keyless.
            state = storage.ensure_ledger(ledger_id, master_key, ledger_type)
        if state.master_key != master_key:
            return p.Status.UNAUTHORIZED, f"wrong master key for ledger {ledger_id}"
        if state.fenced and not recovery:
            return p.Status.FENCED, f"ledger {ledger_id} is fenced"
        cursor = self.sync.cursor(ledger_id)
        if cursor is None and policy.lac_by_sync:
            # What the bookie held before this add survived a restart, so it is durable.
            cursor = self.sync.start(ledger_id, storage.last_entry_id(ledger_id))
        new_ids, new_datas = entry_ids, datas
        if recovery:
            # A recovery-add never overwrites a copy this bookie can read: the copy it
            # brings is one replica's, which may be the corrupt one. The journal gets the
            # copy kept here, so that what is acknowledged is durable (below).
            held = [self._readable(ledger_id, entry_id) for entry_id in entry_ids]
            if any(h is not None for h in held):
                datas = [h if h is not None else d for h, d in zip(held, datas)]
                new_ids = [e for e, h in zip(entry_ids, held) if h is None]
                new_datas = [d for d, h in zip(datas, held) if h is None]
        try:
            if new_ids:
                storage.add_entries(ledger_id, new_ids, new_datas)
        except ValueError as e:  # e.g. an entry id beyond what the storage can index
            return p.Status.BAD_REQUEST, f"ledger storage refused the entries: {e}"
        except Exception as e:  # noqa: BLE001 - a write failed (a full disk, EIO): nothing of the batch is stored
            if is_disk_full(e):
                return self._no_space(e, "to store the entries")
            return self._storage_failed(ledger_id, entry_ids, e)
        storage.set_lac(ledger_id, lac)
        moved = self._lac_moved.pop(ledger_id, None)
        if moved is not None:
            moved.set()
        if policy.journal_data or recovery:
            if self.write_once is not None and policy.sync_before_ack and not recovery:
                seq, once = journal_written_once(self.journal, self.write_once, ledger_id, entry_ids, datas, lac)
                if once:
                    batch.sync_storage = True
                    self.counters.entries_written_once += once
            else:
                seq = self.journal.append(jr.entries_record(ledger_id, entry_ids, datas, lac), ledger_id)
            # Recovery closes the ledger on what recovery-adds acknowledge, so those are
            # synced whatever the ledger type promises its writer.
            if policy.sync_before_ack or recovery:
                batch.wait_seq = max(batch.wait_seq, seq)
            if cursor is not None:
                self.sync.journaled(ledger_id, cursor, seq, entry_ids, lac)
        self.counters.entries_added += len(entry_ids)
        self._timed(batch, self.counters.add_latency, ledger_type)
        return p.Status.OK, ""

    async def sync_storage(self) -> None:
        """Make the entry-log writes of large entries durable (see ``sync_storage`` of batches)."""
        assert self.write_once is not None
        await self.write_once.sync_entries()

    def _readable(self, ledger_id: int, entry_id: int) -> bytes | None:
        try:
            return self.storage.get_entry(ledger_id, entry_id)
        except Exception:  # noqa: BLE001 - a torn or misplaced record is not a copy worth keeping
            return None

    async def _add_after_key_check(self, adds: Sequence[p.AddRequest] | p.AddBatchRequest) -> bytes:
        """Adds to a ledger this bookie holds no master key for (it lost its disk): adopt
        the key they carry only if the ledger's metadata vouches for it, then serve them."""
        first = adds if isinstance(adds, p.AddBatchRequest) else adds[0]
        assert self.bookie.key_verifier is not None
        try:
            matches = await self.bookie.key_verifier(first.ledger_id, first.master_key)
        except Exception as e:  # noqa: BLE001 - the store is down: say so; the client retries or moves on
            log.warning("cannot check the master key of ledger %d: %s", first.ledger_id, e)
            msg = f"this bookie cannot check the master key of ledger {first.ledger_id} now ({e}); retry"
            if isinstance(adds, p.AddBatchRequest):
                return p.encode_add_batch_response(
                    adds.request_id, p.Status.IO_ERROR, adds.ledger_id, len(adds.entry_ids), -1, msg
                )
            return b"".join(
                p.encode_add_response(a.request_id, p.Status.IO_ERROR, a.ledger_id, a.entry_id, -1, msg) for a in adds
            )
        sub = ResponseBatch()
        state = self.storage.ledger_state(first.ledger_id)
        if matches and state is not None and not state.master_key:
            state = self.storage.ensure_ledger(first.ledger_id, first.master_key, first.ledger_type)
            self._append_master(first.ledger_id, state, sub)
        if isinstance(adds, p.AddBatchRequest):
            self._add_batch(adds, sub)
        else:
            self._add_run(adds, sub)
        if sub.sync_storage:
            try:
                await self.sync_storage()
            except Exception as e:  # noqa: BLE001 - the entries are not durable here: say so
                sub.requests = [adds] if isinstance(adds, p.AddBatchRequest) else list(adds)
                return b"".join(bytes(part) for part in self.lost_write_responses(sub, e, "the entry-log fsync"))
        if sub.wait_seq > self.journal.durable_seq:
            await self.journal.wait_durable(sub.wait_seq)
        return b"".join(bytes(part) for part in sub.parts)

    def _needs_key_check(self, ledger_id: int) -> bool:
        if self.bookie.key_verifier is None:
            return False
        state = self.storage.ledger_state(ledger_id)
        return state is not None and not state.master_key

    def _storage_failed(self, ledger_id: int, entry_ids: Sequence[int], error: Exception) -> tuple[p.Status, str]:
        """IO_ERROR for adds the ledger storage could not store; the bookie keeps serving."""
        self.counters.storage_write_errors += 1
        what = f"entries {ledger_id}:{entry_ids[0]}..{entry_ids[-1]}" if entry_ids else f"ledger {ledger_id}"
        log.error("storing %s failed: %s", what, error)
        return p.Status.IO_ERROR, f"this bookie could not store {what}: {error}; write them to another bookie"

    def _no_space(self, error: BaseException, what: str) -> tuple[p.Status, str]:
        self.mode.write_failed(error)
        return p.Status.READ_ONLY, f"bookie {self.bookie.bookie_id} has no space {what} ({error}); it is read-only now"

    def _read_only_refusal(self, what: str) -> str:
        self.counters.read_only_refusals += 1
        until = "it is no longer decommissioned" if self.mode.draining else "its disk usage is below disk_usage_lwm"
        return f"bookie {self.bookie.bookie_id} is read-only ({self.mode.reason}); it refuses {what} until {until}"

    def _read(self, req: p.ReadRequest, batch: ResponseBatch) -> None:
        storage = self.storage
        ledger_id = req.ledger_id
        state = storage.ledger_state(ledger_id)

        def reply(status: p.Status, entry_id: int, payload: Buffer) -> None:
            lac = state.lac if state is not None else -1
            batch.parts.extend(p.encode_read_response(req.request_id, status, ledger_id, entry_id, lac, payload))

        if req.fence:
            if not req.master_key:
                reply(p.Status.BAD_REQUEST, req.entry_id, b"a fencing read must carry the ledger's master key")
                return
            if state is None and ledger_id in self.tombstones:
                reply(p.Status.NO_LEDGER, req.entry_id, f"ledger {ledger_id} was deleted".encode())
                return
            if state is None:
                # Fence even a ledger this bookie never saw, so the old writer cannot
                # start writing to it after recovery has read around it.
                try:
                    state = storage.ensure_ledger(ledger_id, req.master_key, 0)
                except OSError as e:
                    if not is_disk_full(e):
                        raise
                    reply(p.Status.IO_ERROR, req.entry_id, self._no_space(e, f"to fence ledger {ledger_id}")[1].encode())
                    return
                self._append_master(ledger_id, state, batch)
        if state is None:
            reply(p.Status.NO_LEDGER, req.entry_id, f"ledger {ledger_id} is not on this bookie".encode())
            return
        if req.master_key and state.master_key and req.master_key != state.master_key:
            reply(p.Status.UNAUTHORIZED, req.entry_id, f"wrong master key for ledger {ledger_id}".encode())
            return
        if req.fence:
            self._fence(ledger_id, state, batch)
        entry_id = req.entry_id
        # In limbo this bookie may have lost what it acknowledged: never an explicit negative.
        missing = p.Status.UNKNOWN if state.limbo else p.Status.NO_ENTRY
        if entry_id == p.LAST_ENTRY:
            entry_id = storage.last_entry_id(ledger_id)
            if entry_id < 0:
                reply(missing, p.LAST_ENTRY, self._missing(state, f"ledger {ledger_id} has no entries here"))
                return
        try:
            data = storage.get_entry(ledger_id, entry_id)
        except Exception as e:  # noqa: BLE001 - the storage names the file and offset; the bookie keeps serving
            if not state.limbo:
                log.error("read of entry %d:%d failed: %s", ledger_id, entry_id, e)
                reply(p.Status.IO_ERROR, entry_id, f"reading entry {ledger_id}:{entry_id} failed here: {e}".encode())
                return
            data = None  # a torn write from before the crash; the repair task replaces it
        if data is None:
            reply(missing, entry_id, self._missing(state, f"entry {ledger_id}:{entry_id} is not on this bookie"))
            return
        self.counters.entries_read += 1
        self._timed(batch, self.counters.read_latency, state.ledger_type)
        reply(p.Status.OK, entry_id, data)

    @staticmethod
    def _missing(state: LedgerState, what: str) -> bytes:
        if state.limbo:
            return (
                f"{what}, but ledger {state.ledger_id} is in limbo here (this bookie may have lost "
                f"writes in a crash and is repairing it), so that says nothing; ask another replica"
            ).encode()
        return what.encode()

    def _append_master(self, ledger_id: int, state: LedgerState, batch: ResponseBatch) -> None:
        seq = self.journal.append(jr.master_record(ledger_id, state.ledger_type, state.master_key), ledger_id)
        batch.wait_seq = max(batch.wait_seq, seq)

    def _fence(self, ledger_id: int, state: LedgerState, batch: ResponseBatch) -> None:
        if self.journal.is_lost(self._fence_seq.get(ledger_id, 0)):
            # Its record found no space on the disk: into the journal again.
            self._fence_seq[ledger_id] = self.journal.append(jr.fence_record(ledger_id), ledger_id)
        if self.storage.set_fenced(ledger_id):
            self._fence_seq[ledger_id] = self.journal.append(jr.fence_record(ledger_id), ledger_id)
            self.counters.fenced_ledgers += 1
            if not state.write_closed:
                # BP-32: a fenced ledger's writer is done; only recovery adds may follow.
                self.storage.set_write_closed(ledger_id)
                self.counters.write_closed_ledgers += 1
        # A fence is acknowledged only once durable, also when an earlier request set it.
        batch.wait_seq = max(batch.wait_seq, self._fence_seq.get(ledger_id, 0))

    def _write_lac(self, req: p.WriteLacRequest, batch: ResponseBatch) -> None:
        """Explicit LAC: journaled and synced for every ledger type (BYPASS ones included)."""
        state = self.storage.ledger_state(req.ledger_id)

        def reply(status: p.Status, message: str = "") -> None:
            lac = state.lac if state is not None else -1
            batch.parts.append(p.encode_write_lac_response(req.request_id, status, req.ledger_id, lac, message))

        if state is None:
            reply(p.Status.NO_LEDGER, f"ledger {req.ledger_id} is not on this bookie; add an entry first")
            return
        if state.master_key != req.master_key:
            reply(p.Status.UNAUTHORIZED, f"wrong master key for ledger {req.ledger_id}")
            return
        if state.fenced:
            reply(p.Status.FENCED, f"ledger {req.ledger_id} is fenced")
            return
        if self.mode.read_only:
            reply(p.Status.READ_ONLY, self._read_only_refusal("explicit LACs"))
            return
        if req.lac > state.lac:
            self.storage.set_lac(req.ledger_id, req.lac)
            batch.wait_seq = max(batch.wait_seq, self.journal.append(jr.lac_record(req.ledger_id, req.lac), req.ledger_id))
            moved = self._lac_moved.pop(req.ledger_id, None)
            if moved is not None:
                moved.set()
        reply(p.Status.OK)

    def _write_close(self, req: p.WriteCloseRequest, batch: ResponseBatch) -> None:
        """BP-32: advisory, so nothing is journaled; the storage keeps the flag."""
        state = self.storage.ledger_state(req.ledger_id)
        status, message = p.Status.OK, ""
        if state is None:
            status, message = p.Status.NO_LEDGER, f"ledger {req.ledger_id} is not on this bookie"
        elif state.master_key != req.master_key:
            status, message = p.Status.UNAUTHORIZED, f"wrong master key for ledger {req.ledger_id}"
        elif not state.write_closed:
            self.storage.set_write_closed(req.ledger_id)
            self.counters.write_closed_ledgers += 1
        batch.parts.append(p.encode_write_close_response(req.request_id, status, req.ledger_id, message))

    def _list_entries(self, req: p.ListEntriesRequest, batch: ResponseBatch) -> None:
        state = self.storage.ledger_state(req.ledger_id)
        if state is None:
            batch.parts.append(
                p.encode_list_entries_response(
                    req.request_id, p.Status.NO_LEDGER, req.ledger_id, message=f"ledger {req.ledger_id} is not here"
                )
            )
            return
        last = min(req.last, req.first + p.MAX_LIST_SPAN - 1)
        held = np.asarray(self.storage.held_entries(req.ledger_id, req.first, last), dtype=np.int64)
        # Runs of consecutive ids: split where the step is not 1.
        breaks = np.flatnonzero(np.diff(held) != 1) + 1 if held.size else np.empty(0, dtype=np.int64)
        starts = np.concatenate(([0], breaks)) if held.size else breaks
        ends = np.concatenate((breaks - 1, [held.size - 1])) if held.size else breaks
        runs = list(zip(held[starts].tolist(), held[ends].tolist()))
        batch.parts.append(
            p.encode_list_entries_response(
                req.request_id,
                p.Status.OK,
                req.ledger_id,
                limbo=state.limbo,
                next_first=last + 1 if last < req.last else -1,
                runs=runs,
            )
        )

    def _read_lac(self, req: p.ReadLacRequest, batch: ResponseBatch) -> None:
        state = self.storage.ledger_state(req.ledger_id)
        if state is None:
            batch.parts.append(
                p.encode_read_lac_response(
                    req.request_id, p.Status.NO_LEDGER, req.ledger_id, -1, -1, f"ledger {req.ledger_id} is not here"
                )
            )
            return
        if req.previous_lac is not None and state.lac <= req.previous_lac:
            batch.deferred.append(partial(self.long_poll_lac, req))
            return
        last = self.storage.last_entry_id(req.ledger_id)
        batch.parts.append(p.encode_read_lac_response(req.request_id, p.Status.OK, req.ledger_id, state.lac, last))

    async def long_poll_lac(self, req: p.ReadLacRequest) -> bytes:
        """Wait until the ledger's LAC passes ``req.previous_lac`` or the timeout; answer."""
        assert req.previous_lac is not None
        with trio.move_on_after(req.timeout_ms / 1000):
            while (state := self.storage.ledger_state(req.ledger_id)) is not None and state.lac <= req.previous_lac:
                await self._lac_moved.setdefault(req.ledger_id, trio.Event()).wait()
        state = self.storage.ledger_state(req.ledger_id)
        if state is None:
            return p.encode_read_lac_response(req.request_id, p.Status.NO_LEDGER, req.ledger_id, -1, -1, "ledger deleted")
        last = self.storage.last_entry_id(req.ledger_id)
        return p.encode_read_lac_response(req.request_id, p.Status.OK, req.ledger_id, state.lac, last)


def _is_copy(req: p.AddRequest | p.AddBatchRequest) -> bool:
    """A keyless recovery add: autorecovery copying a lost bookie's entries here. It knows
    no master key (only the hash is in the metadata), so the ledger is kept keyless here
    until an add whose key the metadata vouches for comes (:meth:`_add_after_key_check`).
    It is refused (UNAUTHORIZED) where the bookie holds the ledger's key."""
    return req.recovery and not req.master_key
