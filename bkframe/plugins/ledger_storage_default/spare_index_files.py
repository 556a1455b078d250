"""Index files made ahead of need, by a worker thread, for new ledgers' first adds.

A ledger's index file is made with its first entry, on the event loop, in the middle of a
frame of requests. Creating a file and allocating its first blocks are the filesystem's
metadata work, and on a busy disk (a checkpoint fsyncing thousands of index files) each can
wait tens of milliseconds: while 10^5 new ledgers were written to one bookie, single
creates held the loop up to 160 ms (docs/scaling.md). Here a worker thread keeps a pool of
zero-filled, allocated files in ``DIR/spare-index``; a new ledger's index is one of them,
renamed into place (same filesystem, no allocation) and given its header.

A spare is nothing but zeros: one lost in a crash, or left over at a restart, costs
nothing. Those of the right size are used again; others are deleted. When the pool is
empty (a burst faster than the thread, or a disk with less than MIN_FREE_BYTES free), the
index is made on the loop as before.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import shutil
from collections import deque
from pathlib import Path

import trio

from .config import DEFAULT_SPARES

log = logging.getLogger("bkframe.bookie")

SPARE_DIR = "spare-index"
#: Spares are made only while their filesystem has this much free: on a small or nearly
#: full disk the space is the bookie's, and indexes are made as their ledgers come.
MIN_FREE_BYTES = 256 * 1024 * 1024
#: After a failure (e.g. a full disk), the thread tries again this much later.
RETRY_S = 5.0


class SpareIndexFiles:
    """:param directory: the storage's directory (the spares live in ``directory/spare-index``).
    :param size: bytes of each spare: an index file's initial size.
    :param target: how many to keep ready (0: none, every index is made on the loop).
    """

    def __init__(self, directory: Path, size: int, target: int = DEFAULT_SPARES) -> None:
        self.dir = directory / SPARE_DIR
        self.size = size
        self.target = target
        self._ready: deque[Path] = deque()
        self._wanted = trio.Event()
        self._names = itertools.count()
        #: Names this run's spares apart from those left by an earlier one.
        self._run = secrets.token_hex(4)
        #: Spares used, and indexes made on the loop for want of one (for tests and metrics).
        self.taken = 0
        self.missed = 0

    def take(self) -> Path | None:
        """A spare file's path, now owned by the caller (to rename); None if none is ready."""
        if len(self._ready) <= self.target // 2:
            self._wanted.set()
        if not self._ready:
            if self.target:
                self.missed += 1
            return None
        self.taken += 1
        return self._ready.popleft()

    def __len__(self) -> int:
        return len(self._ready)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the pool filled until cancelled. A failure is logged and tried again later:
        without spares, indexes are made on the loop, nothing else changes."""
        if self.target <= 0:
            task_status.started()
            await trio.sleep_forever()
        limiter = trio.CapacityLimiter(1)
        try:
            self._ready.extend(await trio.to_thread.run_sync(self._adopt_leftovers, limiter=limiter))
        except OSError as e:
            log.warning("spare index files in %s: cannot use the ones left over (%s); making new ones", self.dir, e)
        task_status.started()
        while True:
            missing = self.target - len(self._ready)
            if missing <= 0:
                self._wanted = trio.Event()
                await self._wanted.wait()
                continue
            made, error = await trio.to_thread.run_sync(self._make, missing, limiter=limiter)
            self._ready.extend(made)
            if error is not None:
                log.warning(
                    "cannot make spare index files in %s (%s); new ledgers' indexes are made as they come until "
                    "this works again (tried every %.0f s)",
                    self.dir,
                    error,
                    RETRY_S,
                )
            if error is not None or not made:  # failed, or too little free space for spares
                await trio.sleep(RETRY_S)

    def _adopt_leftovers(self) -> list[Path]:
        """In a worker thread: the spares of an earlier run that have the right size,
        allocated again (the others are deleted)."""
        self.dir.mkdir(exist_ok=True)
        kept = []
        for path in sorted(self.dir.iterdir()):
            if path.suffix == ".spare" and path.stat().st_size == self.size and self._allocated(path):
                kept.append(path)
            else:
                path.unlink()
        return kept

    def _allocated(self, path: Path) -> bool:
        """Allocate the whole spare (a crash in the middle of making it may have left holes
        under its full size): an index made from it is written through a mapping, trusting
        every page to be allocated. False if that fails (e.g. a full disk)."""
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return False
        try:
            os.posix_fallocate(fd, 0, self.size)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    def _make(self, n: int) -> tuple[list[Path], OSError | None]:
        """In a worker thread: make up to ``n`` spares; those made, and the failure that
        stopped it early if one did."""
        made: list[Path] = []
        try:
            self.dir.mkdir(exist_ok=True)
            if shutil.disk_usage(self.dir).free < MIN_FREE_BYTES:
                return made, None
            for _ in range(n):
                path = self.dir / f"{self._run}-{next(self._names)}.spare"
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    # Allocated now, so that a full disk fails here and not at a page fault
                    # of the ledger's mapping (see ledger_index._allocate).
                    os.posix_fallocate(fd, 0, self.size)
                except BaseException:
                    os.close(fd)
                    path.unlink(missing_ok=True)
                    raise
                os.close(fd)
                made.append(path)
        except OSError as e:
            return made, e
        return made, None
