"""Journal replay at start and checkpoints while running (seed: bookkeeper-overview, "Data Flush").

A checkpoint takes the journal's position as the LastLogMark, flushes ledger storage,
persists the mark durably in ``DATA_DIR/lastmark.json``, then drops journal files before
it. At start, the journal is replayed from the mark into ledger storage.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import trio

from bkframe.bookie.context import BookieContext
from bkframe.bookie.durability import journal_records as jr
from bkframe.bookie.durability.write_once import apply_stored
from bkframe.bookie.runtime.periodic import run_periodically
from bkframe.bookie.runtime.read_only_mode import NoSpaceToStartError
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.journal import JournalPosition
from bkframe.errors import BKError
from bkframe.storage_kit import fsync
from bkframe.storage_kit.disk_full import is_disk_full
from bkframe.storage_kit.fsync import write_durably

log = logging.getLogger("bkframe.bookie")

LASTMARK_FILE = "lastmark.json"


class LastMarkCorruptError(BKError):
    """``lastmark.json`` does not parse; the bookie must not guess where replay starts."""


class Checkpointer:
    """Replays the journal into ledger storage and checkpoints one bookie.

    :param storage_dirs: what ledger storage and its entry logs keep (fsynced whole after an unclean stop).
    :param last_shutdown_clean: whether the previous run stopped cleanly (BP-46).
    :param interval_s: between two checkpoints (:meth:`run`).
    """

    def __init__(
        self, context: BookieContext, *, storage_dirs: Sequence[Path], last_shutdown_clean: bool, interval_s: float
    ) -> None:
        self.journal = context.journal
        self.storage = context.storage
        self.counters = context.counters
        self.data_dir = context.data_dir
        self.mode = context.mode
        self.storage_dirs = tuple(storage_dirs)
        self.last_shutdown_clean = last_shutdown_clean
        self.interval_s = interval_s
        self._lock = trio.Lock()
        #: Journal records applied by :meth:`replay`.
        self.replayed_records = 0

    def replay(self) -> int:
        """Apply the journal after the last checkpoint's LastLogMark to ledger storage."""
        mark = self._read_lastmark()
        try:
            # Into the reserved space if need be. Replay writes only what storage still
            # lacks, so going again from the mark writes nothing twice.
            count = self.mode.again_if_released(lambda: self._replay_from(mark))
        except OSError as e:
            if not is_disk_full(e):
                raise
            # Only what ledger storage lacks is written (see _not_stored): after a power cut
            # that can be more than a full disk (and the reserved space) holds.
            raise NoSpaceToStartError(
                e.errno,
                f"cannot start: replaying the journal into ledger storage needs space in {self.data_dir} "
                f"and there is none ({e}). Nothing is lost: the journal keeps every entry since the last "
                f"checkpoint. Give the bookie more space, then start it again",
            ) from e
        if count or not self.last_shutdown_clean:
            # Replay skips what storage already holds and re-fences nothing already fenced:
            # that state may still sit in the page cache of a killed run, and the first
            # checkpoint moves the mark past the records that held it. And the killed run's
            # indexes may point into entry-log bytes it never synced: once this run's
            # checkpoint syncs such an index, a power cut would leave it pointing past the
            # log's end. Make all of it durable first.
            syncs = sum(fsync.sync_tree(d) for d in self.storage_dirs)
            self.counters.storage_fsyncs += syncs
        self.replayed_records = count
        since = "since the journal's start (no checkpoint yet)" if mark is None else (
            f"after the checkpoint at journal file {mark.file_id}, offset {mark.offset}"
        )
        log.info("replayed %d journal records %s", count, since)
        return count

    def _replay_from(self, mark: JournalPosition | None) -> int:
        count = 0
        for _, record in self.journal.replay(mark):
            self._apply(jr.decode(record))
            count += 1
        return count

    def _apply(self, rec: jr.Record) -> None:
        storage = self.storage
        if isinstance(rec, jr.MasterRecord):
            storage.ensure_ledger(rec.ledger_id, rec.master_key, rec.ledger_type)
        elif isinstance(rec, jr.EntriesRecord):
            if storage.ledger_state(rec.ledger_id) is None:
                storage.ensure_ledger(rec.ledger_id, b"", 0)
            ids, entries = self._not_stored(rec.ledger_id, rec.entry_ids, rec.entries)
            if ids:
                storage.add_entries(rec.ledger_id, ids, entries)
            storage.set_lac(rec.ledger_id, rec.lac)
        elif isinstance(rec, jr.StoredRecord):
            apply_stored(storage, self.counters, rec)
        elif isinstance(rec, jr.FenceRecord):
            if storage.ledger_state(rec.ledger_id) is None:
                storage.ensure_ledger(rec.ledger_id, b"", 0)
            storage.set_fenced(rec.ledger_id)
        elif isinstance(rec, jr.LacRecord):
            if storage.ledger_state(rec.ledger_id) is not None:
                storage.set_lac(rec.ledger_id, rec.lac)

    def _not_stored(
        self, ledger_id: int, entry_ids: Sequence[int], entries: Sequence[Buffer]
    ) -> tuple[list[int], list[Buffer]]:
        """The replayed entries storage does not already hold, byte for byte.

        After a kill (not a power cut) storage has every entry the journal replays: writing
        them again would only take space, and a bookie restarting on a full disk has none.
        An entry storage cannot read back (a log shorter than its index) is written again.
        """
        ids: list[int] = []
        datas: list[Buffer] = []
        for entry_id, data in zip(entry_ids, entries):
            try:
                held = self.storage.get_entry(ledger_id, entry_id)
            except Exception:  # noqa: BLE001 - whatever storage cannot read back is written again
                held = None
            if held is None or held != data:
                ids.append(entry_id)
                datas.append(data)
        return ids, datas

    def _read_lastmark(self) -> JournalPosition | None:
        path = self.data_dir / LASTMARK_FILE
        try:
            raw = json.loads(path.read_text())
            return JournalPosition(int(raw["file_id"]), int(raw["offset"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as e:
            raise LastMarkCorruptError(
                f"{path} is corrupt ({e}); delete it to replay the whole journal on the next start"
            ) from None

    async def checkpoint(self) -> JournalPosition | None:
        """Flush ledger storage, persist LastLogMark, drop journal files before it.

        On a full disk the mark may not fit: the bookie turns read-only, the old mark stays
        (the journal keeps everything after it, so nothing is lost; a restart replays
        more) and None is returned. A later checkpoint writes it once there is space.
        """
        async with self._lock:
            # The mark is taken first: every record before it was applied to storage
            # before being appended, so flushing storage afterwards covers all of them.
            mark = self.journal.position()
            await self.storage.checkpoint()
            if not await self._persist(mark):
                return None
            removed = self.journal.remove_files_before(mark)
            self.counters.checkpoints += 1
            log.debug("checkpoint at %s removed %d journal files", mark, removed)
            return mark

    async def _persist(self, mark: JournalPosition) -> bool:
        """Write the LastLogMark durably; False if the disk had no space for it (the bookie
        turns read-only; the old mark stays and the journal keeps everything after it, so a
        restart replays more -- which needs no space, see :meth:`_not_stored`)."""
        data = json.dumps({"file_id": mark.file_id, "offset": mark.offset}).encode()
        path = self.data_dir / LASTMARK_FILE
        try:
            try:
                await trio.to_thread.run_sync(write_durably, path, data)
            except OSError as e:
                if not is_disk_full(e) or not self.mode.write_failed(e):
                    raise
                await trio.to_thread.run_sync(write_durably, path, data)  # into the reserved space just released
        except OSError as e:
            if not is_disk_full(e):
                raise
            self.mode.write_failed(e)
            log.warning("no space to write the LastLogMark at %s (%s); the journal keeps what follows the last one", mark, e)
            return False
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Checkpoint every ``checkpoint_interval_s``. A failed checkpoint (e.g. a full disk)
        leaves the LastLogMark where it was -- the journal keeps everything since -- and is
        logged and retried; the bookie goes on serving (read-only if the disk is full)."""
        # checkpoint is looked up at each pass, as whoever wraps it expects.
        await run_periodically(
            "checkpoint", self.interval_s, lambda: self.checkpoint(), mode=self.mode, task_status=task_status
        )

    async def close(self) -> None:
        """The final checkpoint at a clean stop: close the journal (it flushes), then
        ledger storage, then persist the mark."""
        await self.journal.aclose()
        async with self._lock:
            mark = self.journal.position()
            await self.storage.aclose()
            await self._persist(mark)
