"""Ledgers this bookie deleted, remembered so that an old writer cannot bring them back.

When garbage collection deletes a ledger that is gone from the metadata store, every
trace of it leaves the bookie -- its fence too. Without a record of the deletion, the
ledger's old writer (fenced, then its ledger recovered and deleted by another client)
could add to it again: the bookie would create the ledger afresh and keep an entry no
metadata points to. So each deletion leaves a *tombstone*, durable before the ledger's
state goes, and adds, recovery adds and fencing reads of a tombstoned ledger are
answered NO_LEDGER. Ledger ids are never reused, so a tombstone is never wrong; it is
kept for ``retention_s`` (a writer silent for longer than that is long dead) to bound the
file.

The file is a list of ``ledger_id deleted_at`` lines, appended and fsynced per deletion
batch; a torn last line (a crash mid-append) is ignored, since the ledgers it named were
not forgotten yet (their deletion is retried by the next collection).

Deleting ledgers is how a full disk gets space back, and a tombstone comes first: so the
file keeps ROOM bytes allocated past its end (thousands of lines), made at start and after
each append while there is space, and a deletion on a disk with no block left still goes
through.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

from bkframe.storage_kit.disk_full import is_disk_full
from bkframe.storage_kit.fsync import append_durably, keep_room, write_durably

log = logging.getLogger("bkframe.bookie")

TOMBSTONE_FILE = "deleted-ledgers"
#: Bytes kept allocated past the end of the file, for deletions on a full disk: about 3,000
#: lines, more than one batch of the garbage collector.
ROOM = 128 * 1024


class Tombstones:
    def __init__(self, data_dir: Path, retention_s: float) -> None:
        self.path = data_dir / TOMBSTONE_FILE
        self.retention_s = retention_s
        self._deleted_at: dict[int, float] = {}
        self._lines = 0
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            text = ""
        if text and not text.endswith("\n"):
            # Torn by a crash mid-append: those ledgers were not forgotten yet. Cut the
            # partial line off so that later appends start on a line of their own.
            keep = text.rfind("\n") + 1
            os.truncate(self.path, keep)
            text = text[:keep]
        for line in text.splitlines():
            try:
                ledger_id, at = line.split()
                self._deleted_at[int(ledger_id)] = float(at)
                self._lines += 1
            except ValueError:
                log.warning("%s: ignoring unreadable line %r", self.path, line)
        self._expire()
        self._keep_room()

    def _keep_room(self) -> None:
        """Make the file (if missing) with ROOM allocated past its end; nothing if the disk
        has no room now (the next append tries again)."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError as e:
            log.warning("%s: cannot keep room for deletions on a full disk: %s", self.path, e)
            return
        try:
            keep_room(fd, ROOM)
        finally:
            os.close(fd)

    def __contains__(self, ledger_id: int) -> bool:
        at = self._deleted_at.get(ledger_id)
        if at is None:
            return False
        if time.time() - at > self.retention_s:
            del self._deleted_at[ledger_id]
            return False
        return True

    def __len__(self) -> int:
        return len(self._deleted_at)

    def _expire(self) -> None:
        cutoff = time.time() - self.retention_s
        for ledger_id in [i for i, at in self._deleted_at.items() if at < cutoff]:
            del self._deleted_at[ledger_id]

    def record(self, ledger_ids: Iterable[int]) -> None:
        """Blocking (run it in a thread): make the deletions durable, before the ledgers'
        state is dropped. Rewrites the file instead when it is mostly expired lines."""
        now = time.time()
        ids = list(ledger_ids)
        if not ids:
            return
        for ledger_id in ids:
            self._deleted_at[ledger_id] = now
        self._expire()
        if self._lines > 2 * len(self._deleted_at) + 1000:
            data = "".join(f"{i} {at}\n" for i, at in sorted(self._deleted_at.items())).encode()
            try:
                write_durably(self.path, data)
            except OSError as e:
                if not is_disk_full(e):
                    raise
                # A new file needs new blocks; appending goes into the room kept (below).
            else:
                self._lines = len(self._deleted_at)
                self._keep_room()
                return
        try:
            append_durably(self.path, "".join(f"{i} {now}\n" for i in ids).encode(), room=ROOM)
        except OSError:
            # No partial line was left (a full disk, say): the deletion is retried.
            for ledger_id in ids:
                self._deleted_at.pop(ledger_id, None)
            raise
        self._lines += len(ids)
