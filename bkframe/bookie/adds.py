"""ADD, ADD_BATCH and SYNC: storing entries, master-key checks, large entries written once,
and the answers of adds that are not acknowledged.

An add is stored in ledger storage and journaled on the event loop; its answer waits in the
:class:`ResponseBatch` for what its ledger type needs to be durable (see
:meth:`RequestHandler.durable_answers <bkframe.bookie.requests.RequestHandler.durable_answers>`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

from bkframe import proto as p
from bkframe.bookie import journal_records as jr
from bkframe.bookie.context import BookieContext
from bkframe.bookie.response_batch import ResponseBatch
from bkframe.bookie.write_once import journal_written_once
from bkframe.core.disk_full import is_disk_full
from bkframe.core.interfaces import Buffer, JournalWriteError
from bkframe.core.ledger_keys import keys_equal

log = logging.getLogger("bkframe.bookie")


class Adds:
    """One bookie's adds and syncs."""

    def __init__(self, context: BookieContext) -> None:
        self.context = context
        self.journal = context.journal
        self.storage = context.storage
        self.counters = context.counters
        self.sync = context.sync
        self.types_by_id = context.types_by_id
        self.write_once = context.write_once

    def add(self, adds: Sequence[p.AddRequest], batch: ResponseBatch) -> None:
        """ADD: a run of adds to one ledger (a frame's consecutive adds are one run)."""
        if self._needs_key_check(adds[0].ledger_id) and not is_copy(adds[0]):
            batch.deferred.append(partial(self._add_after_key_check, adds))
        else:
            self._add_run(adds, batch)

    def add_batch(self, req: p.AddBatchRequest, batch: ResponseBatch) -> None:
        """ADD_BATCH: many entries of one ledger in one request."""
        if self._needs_key_check(req.ledger_id) and not is_copy(req):
            batch.deferred.append(partial(self._add_after_key_check, req))
        else:
            self._add_batch(req, batch)

    def sync_request(self, req: p.SyncRequest, batch: ResponseBatch) -> None:
        """SYNC: answered by its own task (:meth:`sync_ledger`) once the ledger is synced."""
        if self.storage.ledger_state(req.ledger_id) is None:
            batch.parts.append(
                p.encode_sync_response(req.request_id, p.Status.NO_LEDGER, req.ledger_id, -1, "ledger not here")
            )
        else:
            batch.deferred.append(partial(self.sync_ledger, req))

    def refused(self, req: p.AddRequest | p.AddBatchRequest, status: p.Status, message: str) -> Buffer:
        """The answer to an add that is not acknowledged, with the ledger's LastAddSynced."""
        las = self.sync.last_add_synced(req.ledger_id)
        if type(req) is p.AddBatchRequest:
            return p.encode_add_batch_response(req.request_id, status, req.ledger_id, len(req.entry_ids), las, message)
        assert type(req) is p.AddRequest
        return p.encode_add_response(req.request_id, status, req.ledger_id, req.entry_id, las, message)

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
            self.context.journal_write_failed(e)
            return p.encode_sync_response(
                req.request_id,
                self.context.lost_status(),
                req.ledger_id,
                self.sync.last_add_synced(req.ledger_id),
                f"bookie {self.context.bookie_id}: entries of ledger {req.ledger_id} were not written to its journal ({e}); "
                f"they are not synced here",
            )
        return p.encode_sync_response(req.request_id, p.Status.OK, req.ledger_id, self.sync.last_add_synced(req.ledger_id))

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
        context = self.context
        storage = self.storage
        policy = self.types_by_id.get(ledger_type)
        if policy is None:
            return p.Status.BAD_REQUEST, (
                f"unknown ledger type id {ledger_type}; this bookie serves "
                + ", ".join(f"{t.name}={t.type_id}" for t in self.types_by_id.values())
            )
        if context.mode.read_only and not recovery:
            # As BookKeeper: recovery adds (its high-priority writes) still go through, so
            # that ledgers this bookie holds can be closed; they need little space.
            return p.Status.READ_ONLY, context.read_only_refusal("adds")
        state = storage.ledger_state(ledger_id)
        if state is None and ledger_id in context.tombstones:
            return p.Status.NO_LEDGER, (
                f"ledger {ledger_id} was deleted (this bookie garbage-collected it); it takes no more entries"
            )
        if state is None:
            try:
                state = storage.ensure_ledger(ledger_id, master_key, ledger_type)
            except Exception as e:  # noqa: BLE001 - e.g. no space for the ledger's index
                if is_disk_full(e):
                    return context.no_space(e, f"to store ledger {ledger_id}")
                return self._storage_failed(ledger_id, entry_ids, e)
            seq = self.journal.append(jr.master_record(ledger_id, ledger_type, master_key), ledger_id)
            batch.wait_seq = max(batch.wait_seq, seq)
        elif not state.master_key:
            if context.key_verifier is not None and not (recovery and not master_key):
                # Known only from a lost disk's protection, replayed entries or a keyless
                # fence: _add_after_key_check adopts a key once metadata vouches for it.
                return p.Status.UNAUTHORIZED, (
                    f"wrong master key for ledger {ledger_id}: it does not match the password hash in the ledger's metadata"
                )
            # No metadata store to check against (a standalone bookie): adopt this key. A
            # keyless copy (autorecovery, see is_copy) adopts none: the ledger stays keyless.
            state = storage.ensure_ledger(ledger_id, master_key, ledger_type)
        if not keys_equal(state.master_key, master_key):
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
                return context.no_space(e, "to store the entries")
            return self._storage_failed(ledger_id, entry_ids, e)
        storage.set_lac(ledger_id, lac)
        context.lac_waiters.moved(ledger_id)
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
        context.timed(batch, self.counters.add_latency, ledger_type)
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
        verifier = self.context.key_verifier
        assert verifier is not None
        try:
            matches = await verifier(first.ledger_id, first.master_key)
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
            self.context.journal_master_key(first.ledger_id, state, sub)
        if isinstance(adds, p.AddBatchRequest):
            self._add_batch(adds, sub)
        else:
            self._add_run(adds, sub)
        if sub.sync_storage:
            try:
                await self.sync_storage()
            except Exception as e:  # noqa: BLE001 - the entries are not durable here: say so
                status, message = self.context.lost_write(e, "the entry-log fsync")
                refused = [adds] if isinstance(adds, p.AddBatchRequest) else adds
                return b"".join(bytes(self.refused(a, status, message)) for a in refused)
        if sub.wait_seq > self.journal.durable_seq:
            await self.journal.wait_durable(sub.wait_seq)
        return b"".join(bytes(part) for part in sub.parts)

    def _needs_key_check(self, ledger_id: int) -> bool:
        if self.context.key_verifier is None:
            return False
        state = self.storage.ledger_state(ledger_id)
        return state is not None and not state.master_key

    def _storage_failed(self, ledger_id: int, entry_ids: Sequence[int], error: Exception) -> tuple[p.Status, str]:
        """IO_ERROR for adds the ledger storage could not store; the bookie keeps serving."""
        self.counters.storage_write_errors += 1
        what = f"entries {ledger_id}:{entry_ids[0]}..{entry_ids[-1]}" if entry_ids else f"ledger {ledger_id}"
        log.error("storing %s failed: %s", what, error)
        return p.Status.IO_ERROR, f"this bookie could not store {what}: {error}; write them to another bookie"


def is_copy(req: p.AddRequest | p.AddBatchRequest) -> bool:
    """A keyless recovery add: autorecovery copying a lost bookie's entries here. It knows
    no master key (only the hash is in the metadata), so the ledger is kept keyless here
    until an add whose key the metadata vouches for comes (:meth:`Adds._add_after_key_check`).
    It is refused (UNAUTHORIZED) where the bookie holds the ledger's key."""
    return req.recovery and not req.master_key
