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
from typing import Literal

import attrs

from bkframe.bookie.context import BookieContext
from bkframe.bookie.durability import journal_records as jr
from bkframe.bookie.durability.sync_cursor import SyncCursor
from bkframe.bookie.durability.write_once import journal_written_once
from bkframe.bookie.key_check import TIMEOUT_S, KeyCheckPending, Verdict
from bkframe.bookie.response_batch import ResponseBatch
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.auth import INTERNAL_METHOD
from bkframe.core.interfaces.durability import DurabilityPolicy
from bkframe.core.interfaces.journal import JournalWriteError
from bkframe.core.ledger_keys import keys_equal
from bkframe.proto.codes import Status
from bkframe.proto.ops.add import AddRequest, encode_add_response
from bkframe.proto.ops.add_batch import AddBatchRequest, encode_add_batch_response
from bkframe.proto.ops.sync import SyncRequest, encode_sync_response
from bkframe.storage_kit.disk_full import is_disk_full

log = logging.getLogger("bkframe.bookie")


@attrs.define
class Entries:
    """Entries of one ledger that one add request carries, or a run of ADDs to one ledger
    (one key, type and recovery flag: :meth:`Adds._add_run` serves odd runs one by one):
    what :meth:`Adds._store` stores, all or none. Not frozen: one is made per run on the
    add path, and attrs' frozen ``__init__`` costs about three times as much."""

    ledger_id: int
    master_key: bytes
    ledger_type: int
    recovery: bool
    #: The highest LAC the requests piggyback.
    lac: int
    entry_ids: Sequence[int]
    datas: Sequence[Buffer]

    @classmethod
    def of_run(cls, adds: Sequence[AddRequest]) -> Entries:
        first = adds[0]
        return cls(
            first.ledger_id,
            first.master_key,
            first.ledger_type,
            first.recovery,
            max(a.lac for a in adds),
            [a.entry_id for a in adds],
            [a.data for a in adds],
        )

    @classmethod
    def of_batch(cls, req: AddBatchRequest) -> Entries:
        return cls(req.ledger_id, req.master_key, req.ledger_type, req.recovery, req.lac, req.entry_ids, req.entries)


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

    def add(self, adds: Sequence[AddRequest], batch: ResponseBatch) -> None:
        """ADD: a run of adds to one ledger (a frame's consecutive adds are one run)."""
        admission = self._admission(adds[0], batch)
        if admission is True:
            self._add_run(adds, batch)
        elif admission is False:
            batch.deferred.append(partial(self._add_after_key_check, adds, batch.received, batch.access.try_again))
        else:
            batch.parts.extend(self.refused(a, *admission) for a in adds)

    def add_batch(self, req: AddBatchRequest, batch: ResponseBatch) -> None:
        """ADD_BATCH: many entries of one ledger in one request."""
        admission = self._admission(req, batch)
        if admission is True:
            self._add_batch(req, batch)
        elif admission is False:
            batch.deferred.append(partial(self._add_after_key_check, req, batch.received, batch.access.try_again))
        else:
            batch.parts.append(self.refused(req, *admission))

    def _admission(self, req: AddRequest | AddBatchRequest, batch: ResponseBatch) -> bool | tuple[Status, str]:
        """Whether adds may be served now (True), only once the metadata store vouched for
        their key (False), or are refused (status, message). Only a ledger this bookie does
        not hold with a key is checked: its first add, or one after a lost disk or a keyless
        copy (see :mod:`.key_check`); the adds of a ledger it serves are compared in _store."""
        if is_copy(req):
            if batch.access.internal:
                return True
            return Status.UNAUTHORIZED, (
                f"a recovery add without a master key (a keyless copy) of ledger {req.ledger_id} is taken only from "
                f"the cluster's own processes (AUTH {INTERNAL_METHOD}); add with the ledger's master key"
            )
        check = self.context.key_check
        if check is None:
            return True  # no metadata store to ask: the first add's key is the ledger's (docs/security.md)
        if self.context.mode.read_only and not req.recovery:
            return True  # _store refuses it (READ_ONLY) before anything is made: no need to ask
        state = self.storage.ledger_state(req.ledger_id)
        if state is not None and state.master_key:
            return True
        if state is None and req.ledger_id in self.context.tombstones:
            return True  # _store answers that it was deleted
        verdict = check.cached(req.ledger_id, req.master_key)
        if verdict is None:
            return False
        return self.vouched(req.ledger_id, req.master_key, req.ledger_type, verdict, batch)

    def vouched(
        self, ledger_id: int, master_key: bytes, ledger_type: int, verdict: Verdict, batch: ResponseBatch
    ) -> Literal[True] | tuple[Status, str]:
        """True once the metadata vouched for the key -- a ledger held without a key adopts it
        (journaled; ``batch`` waits for it) -- else the refusal. Nothing is made for a refusal."""
        if verdict is Verdict.NO_LEDGER:
            return Status.NO_LEDGER, (
                f"ledger {ledger_id} does not exist in the metadata store: a bookie takes a ledger only once it is "
                f"created there (create it with the client first)"
            )
        if verdict is Verdict.WRONG_KEY:
            return Status.UNAUTHORIZED, (
                f"wrong master key for ledger {ledger_id}: it does not match the password hash in the ledger's metadata"
            )
        state = self.storage.ledger_state(ledger_id)
        if state is not None and not state.master_key:
            state = self.storage.ensure_ledger(ledger_id, master_key, ledger_type)
            self.context.journal_master_key(ledger_id, state, batch)
        return True

    def sync_request(self, req: SyncRequest, batch: ResponseBatch) -> None:
        """SYNC: answered by its own task (:meth:`sync_ledger`) once the ledger is synced."""
        if self.storage.ledger_state(req.ledger_id) is None:
            batch.parts.append(
                encode_sync_response(req.request_id, Status.NO_LEDGER, req.ledger_id, -1, "ledger not here")
            )
        else:
            batch.deferred.append(partial(self.sync_ledger, req))

    def refused(self, req: AddRequest | AddBatchRequest, status: Status, message: str) -> Buffer:
        """The answer to an add that is not acknowledged, with the ledger's LastAddSynced."""
        las = self.sync.last_add_synced(req.ledger_id)
        if type(req) is AddBatchRequest:
            return encode_add_batch_response(req.request_id, status, req.ledger_id, len(req.entry_ids), las, message)
        assert type(req) is AddRequest
        return encode_add_response(req.request_id, status, req.ledger_id, req.entry_id, las, message)

    def _add_run(self, adds: Sequence[AddRequest], batch: ResponseBatch) -> None:
        first = adds[0]
        # Requests of one run may still disagree on key, type or recovery flag: then
        # serve them one by one (rare, only from odd clients), each admitted on its own:
        # the run was admitted on its first request's key and flags alone.
        if len(adds) > 1 and any(
            a.master_key != first.master_key or a.ledger_type != first.ledger_type or a.recovery != first.recovery for a in adds
        ):
            for a in adds:
                self.add([a], batch)
            return
        status, message = self._store(Entries.of_run(adds), batch)
        encode = encode_add_response
        las = self.sync.last_add_synced(first.ledger_id)
        batch.parts.extend(encode(a.request_id, status, a.ledger_id, a.entry_id, las, message) for a in adds)

    def _add_batch(self, req: AddBatchRequest, batch: ResponseBatch) -> None:
        status, message = self._store(Entries.of_batch(req), batch)
        batch.parts.append(
            encode_add_batch_response(
                req.request_id, status, req.ledger_id, len(req.entry_ids), self.sync.last_add_synced(req.ledger_id), message
            )
        )

    async def sync_ledger(self, req: SyncRequest) -> bytes:
        """SYNC: make what this bookie holds of the ledger durable; answer LastAddSynced."""
        seq = self.sync.last_seq(req.ledger_id)
        try:
            if seq > self.journal.durable_seq or self.journal.is_lost(seq):
                await self.journal.wait_durable(seq)
        except JournalWriteError as e:
            self.context.journal_write_failed(e)
            return encode_sync_response(
                req.request_id,
                self.context.lost_status(),
                req.ledger_id,
                self.sync.last_add_synced(req.ledger_id),
                f"bookie {self.context.bookie_id}: entries of ledger {req.ledger_id} were not written to its journal ({e}); "
                f"they are not synced here",
            )
        return encode_sync_response(req.request_id, Status.OK, req.ledger_id, self.sync.last_add_synced(req.ledger_id))

    def _store(self, e: Entries, batch: ResponseBatch) -> tuple[Status, str]:
        """Store entries of one ledger (all or none); return the status for all of them."""
        policy = self.types_by_id.get(e.ledger_type)
        if policy is None:
            return Status.BAD_REQUEST, (
                f"unknown ledger type id {e.ledger_type}; this bookie serves "
                + ", ".join(f"{t.name}={t.type_id}" for t in self.types_by_id.values())
            )
        refusal = self._admit(e, batch)
        if refusal is not None:
            return refusal
        cursor = self.sync.cursor(e.ledger_id)
        if cursor is None and policy.lac_by_sync:
            # What the bookie held before this add survived a restart, so it is durable.
            cursor = self.sync.start(e.ledger_id, self.storage.last_entry_id(e.ledger_id))
        datas, new_ids, new_datas = self._kept_copies(e) if e.recovery else (e.datas, e.entry_ids, e.datas)
        refusal = self._write(e, new_ids, new_datas)
        if refusal is not None:
            return refusal
        if policy.journal_data or e.recovery:
            self._journal(e, datas, policy, cursor, batch)
        self.counters.entries_added += len(e.entry_ids)
        self.context.timed(batch, self.counters.add_latency, e.ledger_type)
        return Status.OK, ""

    def _admit(self, e: Entries, batch: ResponseBatch) -> tuple[Status, str] | None:
        """The refusal, if the adds may not go in; None once they may: the bookie is writable
        (or they are recovery adds), the ledger was not deleted here, their key is the
        ledger's and it is not fenced. A new ledger is made here (its master record
        journaled: ``batch`` waits for it)."""
        context = self.context
        storage = self.storage
        ledger_id, master_key, recovery = e.ledger_id, e.master_key, e.recovery
        if context.mode.read_only and not recovery:
            # As BookKeeper: recovery adds (its high-priority writes) still go through, so
            # that ledgers this bookie holds can be closed; they need little space.
            return Status.READ_ONLY, context.read_only_refusal("adds")
        state = storage.ledger_state(ledger_id)
        if state is None and ledger_id in context.tombstones:
            return Status.NO_LEDGER, (
                f"ledger {ledger_id} was deleted (this bookie garbage-collected it); it takes no more entries"
            )
        if state is None:
            try:
                state = storage.ensure_ledger(ledger_id, master_key, e.ledger_type)
            except Exception as error:  # noqa: BLE001 - e.g. no space for the ledger's index
                if is_disk_full(error):
                    return context.no_space(error, f"to store ledger {ledger_id}")
                return self._storage_failed(ledger_id, e.entry_ids, error)
            seq = self.journal.append(jr.master_record(ledger_id, e.ledger_type, master_key), ledger_id)
            batch.wait_seq = max(batch.wait_seq, seq)
        elif not state.master_key:
            if context.key_check is not None and not (recovery and not master_key):
                # Known only from a lost disk's protection, replayed entries or a keyless
                # fence: _add_after_key_check adopts a key once metadata vouches for it.
                return Status.UNAUTHORIZED, (
                    f"wrong master key for ledger {ledger_id}: it does not match the password hash in the ledger's metadata"
                )
            # No metadata store to check against (a standalone bookie): adopt this key. A
            # keyless copy (autorecovery, see is_copy) adopts none: the ledger stays keyless.
            state = storage.ensure_ledger(ledger_id, master_key, e.ledger_type)
        if not keys_equal(state.master_key, master_key) and not (recovery and not master_key):
            # A keyless copy (admitted only from the cluster's own processes, see
            # _admission) may also go where the ledger's key is held: the bookie holds
            # another fragment of it, and on a small cluster every candidate may.
            return Status.UNAUTHORIZED, f"wrong master key for ledger {ledger_id}"
        if state.fenced and not recovery:
            return Status.FENCED, f"ledger {ledger_id} is fenced"
        return None

    def _kept_copies(self, e: Entries) -> tuple[Sequence[Buffer], Sequence[int], Sequence[Buffer]]:
        """Recovery adds: what to journal, and the ids and data of the entries to store.

        A recovery add never overwrites a copy this bookie can read: the copy it brings is
        one replica's, which may be the corrupt one. The journal gets the copy kept here,
        so that what is acknowledged is durable; only the entries it lacks are stored."""
        held = [self._readable(e.ledger_id, entry_id) for entry_id in e.entry_ids]
        if all(h is None for h in held):
            return e.datas, e.entry_ids, e.datas
        datas = [h if h is not None else d for h, d in zip(held, e.datas)]
        new_ids = [i for i, h in zip(e.entry_ids, held) if h is None]
        new_datas = [d for d, h in zip(datas, held) if h is None]
        return datas, new_ids, new_datas

    def _write(self, e: Entries, new_ids: Sequence[int], new_datas: Sequence[Buffer]) -> tuple[Status, str] | None:
        """Write the new entries to ledger storage and move the ledger's LAC; the refusal if
        the storage refused them (nothing of them is stored then)."""
        try:
            if new_ids and e.recovery:
                # A full bookie still takes recovery adds: into its reserved space if need be.
                self.context.mode.again_if_released(
                    partial(self.storage.add_entries, e.ledger_id, new_ids, new_datas), self._served_again
                )
            elif new_ids:
                self.storage.add_entries(e.ledger_id, new_ids, new_datas)
        except ValueError as error:  # e.g. an entry id beyond what the storage can index
            return Status.BAD_REQUEST, f"ledger storage refused the entries: {error}"
        except Exception as error:  # noqa: BLE001 - a write failed (a full disk, EIO): nothing of the batch is stored
            if is_disk_full(error):
                return self.context.no_space(error, "to store the entries")
            return self._storage_failed(e.ledger_id, e.entry_ids, error)
        self.storage.set_lac(e.ledger_id, e.lac)
        self.context.lac_waiters.moved(e.ledger_id)
        return None

    def _served_again(self) -> None:
        self.counters.duties_served_again += 1

    def _journal(
        self, e: Entries, datas: Sequence[Buffer], policy: DurabilityPolicy, cursor: SyncCursor | None, batch: ResponseBatch
    ) -> None:
        """Journal the entries (a large PD entry: its location, written once) and say what
        their answers wait for."""
        if self.write_once is not None and policy.sync_before_ack and not e.recovery:
            seq, once = journal_written_once(self.journal, self.write_once, e.ledger_id, e.entry_ids, datas, e.lac)
            if once:
                batch.sync_storage = True
                self.counters.entries_written_once += once
        else:
            seq = self.journal.append(jr.entries_record(e.ledger_id, e.entry_ids, datas, e.lac), e.ledger_id)
        # Recovery closes the ledger on what recovery-adds acknowledge, so those are
        # synced whatever the ledger type promises its writer.
        if policy.sync_before_ack or e.recovery:
            batch.wait_seq = max(batch.wait_seq, seq)
        if cursor is not None:
            self.sync.journaled(e.ledger_id, cursor, seq, e.entry_ids, e.lac)

    async def sync_storage(self) -> None:
        """Make the entry-log writes of large entries durable (see ``sync_storage`` of batches)."""
        assert self.write_once is not None
        await self.write_once.sync_entries()

    def _readable(self, ledger_id: int, entry_id: int) -> bytes | None:
        try:
            return self.storage.get_entry(ledger_id, entry_id)
        except Exception:  # noqa: BLE001 - a torn or misplaced record is not a copy worth keeping
            return None

    async def _add_after_key_check(
        self, adds: Sequence[AddRequest] | AddBatchRequest, received: float, try_again: bool
    ) -> bytes:
        """Adds to a ledger this bookie holds no master key for (their ledger's first adds
        here, or after a lost disk): served only once the ledger's metadata vouches for the
        key they carry; nothing is made otherwise. A client that understands TRY_AGAIN is
        answered so once the check took ``key_check_wait_s`` (see :mod:`.key_check`)."""
        first = adds if isinstance(adds, AddBatchRequest) else adds[0]
        requests = [adds] if isinstance(adds, AddBatchRequest) else adds
        check = self.context.key_check
        assert check is not None
        try:
            verdict = await check.check(first.ledger_id, first.master_key, wait_s=None if try_again else TIMEOUT_S)
        except KeyCheckPending as e:
            self.counters.key_checks_pending += 1
            msg = f"{e}: send this add again (the check goes on here)"
            return b"".join(bytes(self.refused(a, Status.TRY_AGAIN, msg)) for a in requests)
        except Exception as e:  # noqa: BLE001 - the store is down: say so; the client retries or moves on
            log.warning("cannot check the master key of ledger %d: %s", first.ledger_id, e)
            msg = f"this bookie cannot check the master key of ledger {first.ledger_id} now ({e!r}); retry"
            return b"".join(bytes(self.refused(a, Status.IO_ERROR, msg)) for a in requests)
        sub = ResponseBatch()
        admission = self.vouched(first.ledger_id, first.master_key, first.ledger_type, verdict, sub)
        if admission is not True:
            return b"".join(bytes(self.refused(a, *admission)) for a in requests)
        if isinstance(adds, AddBatchRequest):
            self._add_batch(adds, sub)
        else:
            self._add_run(adds, sub)
        if sub.sync_storage:
            try:
                await self.sync_storage()
            except Exception as e:  # noqa: BLE001 - the entries are not durable here: say so
                status, message = self.context.lost_write(e, "the entry-log fsync")
                return b"".join(bytes(self.refused(a, status, message)) for a in requests)
        if sub.wait_seq > self.journal.durable_seq:
            try:
                await self.journal.wait_durable(sub.wait_seq)
            except JournalWriteError as e:
                status, message = self.context.lost_write(e, "the journal write")
                return b"".join(bytes(self.refused(a, status, message)) for a in requests)
        sub.received = received
        self.context.observe(sub)
        return b"".join(bytes(part) for part in sub.parts)

    def _storage_failed(self, ledger_id: int, entry_ids: Sequence[int], error: Exception) -> tuple[Status, str]:
        """IO_ERROR for adds the ledger storage could not store; the bookie keeps serving.
        TOO_MANY_REQUESTS if it only lacked a file descriptor (nothing is wrong with the disk)."""
        what = f"entries {ledger_id}:{entry_ids[0]}..{entry_ids[-1]}" if entry_ids else f"ledger {ledger_id}"
        refusal = self.context.refusal_for(error, what)
        if refusal is not None:
            return refusal
        self.counters.storage_write_errors += 1
        log.error("storing %s failed: %s", what, error)
        return Status.IO_ERROR, f"this bookie could not store {what}: {error}; write them to another bookie"


def is_copy(req: AddRequest | AddBatchRequest) -> bool:
    """A keyless recovery add: autorecovery copying a lost bookie's entries here. It knows
    no master key (only the hash is in the metadata), so the ledger is kept keyless here
    until an add whose key the metadata vouches for comes (:meth:`Adds.vouched`).
    It is taken only from the cluster's own processes (:mod:`bkframe.bookie.access`), also where the
    bookie holds the ledger's key (for another fragment of it), which it then keeps."""
    return req.recovery and not req.master_key
