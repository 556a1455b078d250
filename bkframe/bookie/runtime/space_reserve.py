"""Space a bookie keeps back for what it must still write when its disk is full.

A read-only bookie still fences, takes recovery adds, journals both and writes its
LastLogMark, so that every ledger it holds can be recovered and closed (docs/reliability.md,
"On a full disk"). The 95 % threshold leaves room for that only if the bookie is the one
filling the disk; when another process fills the filesystem to 100 %, the first write that
finds no space is often a fence, and recovery then stalls for want of a few hundred bytes.

So the bookie holds a *reserve*: a file ``.reserved-space`` of ``reserved_space_bytes``,
allocated with ``posix_fallocate`` (real blocks, counted by ``df``), in the first directory
it writes on each filesystem (the data dir first; a journal directory on a disk of its own
gets one too). When a write finds no space (ENOSPC, EDQUOT) the bookie turns read-only and
releases the reserve (the file is truncated to nothing); the write is tried again if it was
a read-only duty (a fence, a recovery add), and everything a read-only bookie writes from
then on has that room. While the reserve is missing it counts as used in the disk check, so
the bookie turns writable again only once the filesystem has room below ``disk_usage_lwm``
*with* the reserve taken back (refilled as soon as the filesystem stays below the threshold
with it), and never flaps between the two.

On each filesystem the reserve is at most 2.5 % of it and at most half of the room
``disk_usage_threshold`` leaves, so that a bookie on a small disk still starts writable; a
threshold of 1.0 leaves no room, and no reserve.

A process that keeps writing to the filesystem as fast as space appears can take the
released room before the bookie uses it: the reserve is made for a disk some other process
*filled*, not one it is still filling. A bookie's disks should be its own.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path

import attrs

from bkframe.storage_kit.disk_full import DISK_FULL_ERRNOS

log = logging.getLogger("bkframe.bookie")

#: The reserve file's name, in the first directory of each filesystem a bookie writes.
RESERVE_FILE = ".reserved-space"
#: Reserves are whole 4 KiB blocks.
BLOCK = 4096
#: A reserve takes at most this share of its filesystem (and at most half the room the
#: threshold leaves), so that a bookie on a small disk still starts writable.
MAX_SHARE = 0.025


@attrs.frozen
class DiskUsage:
    """One measurement of a filesystem, as BookKeeper takes it: ``1 - usable / total``.

    ``free`` is what the bookie may count on: the filesystem's free bytes less the part of
    its reserve that is missing (released, or never made), which the bookie must take back
    before it is writable again."""

    total: int
    free: int
    #: Where it was measured (the fullest of the bookie's filesystems).
    path: Path | None = None

    @property
    def fraction(self) -> float:
        return 1.0 - self.free / self.total if self.total > 0 else 1.0


class _Reserve:
    """The reserve file of one filesystem."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / RESERVE_FILE

    def held(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def fill(self, target: int) -> bool:
        """Allocate the file up to ``target`` bytes; False if the filesystem had no room (the
        file is left as it was)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            before = os.fstat(fd).st_size
            if before >= target:
                return True
            try:
                os.posix_fallocate(fd, 0, target)
            except OSError as e:
                if e.errno not in DISK_FULL_ERRNOS and e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(fd, before)  # whatever part was allocated goes back
                return False
            return True
        finally:
            os.close(fd)

    def release(self) -> int:
        """Truncate the file to nothing; the bytes it held."""
        held = self.held()
        if held:
            os.truncate(self.path, 0)
        return held


class SpaceReserve:
    """A bookie's reserves, one per filesystem of ``directories`` (see the module's docstring).

    ``size``: ``reserved_space_bytes`` (0: none). ``threshold``: ``disk_usage_threshold``,
    which caps each reserve at half the room it leaves. :meth:`release` runs on the event
    loop (a truncate: no data to write); :meth:`measure` and :meth:`refill` are blocking
    (statvfs, fallocate): off the loop, except once at start.
    """

    def __init__(self, directories: Iterable[Path], size: int, threshold: float) -> None:
        self.size = size
        self.threshold = threshold
        self._lock = threading.Lock()  # refill runs in a worker thread, release on the loop
        self._reserves: list[_Reserve] = []
        seen: set[int] = set()
        for directory in directories:
            device = os.stat(directory).st_dev
            if device not in seen:
                seen.add(device)
                self._reserves.append(_Reserve(Path(directory)))

    @property
    def directories(self) -> list[Path]:
        """Where the reserves are: one directory per filesystem."""
        return [r.directory for r in self._reserves]

    def target(self, total: int) -> int:
        """The reserve on a filesystem of ``total`` bytes."""
        room = int(min(MAX_SHARE, (1.0 - self.threshold) / 2) * total)
        return max(0, min(self.size, room)) // BLOCK * BLOCK

    def held(self) -> int:
        """Bytes the reserve files hold now, on every filesystem."""
        return sum(r.held() for r in self._reserves)

    def release(self) -> int:
        """A write found no space: give the reserves back to the filesystems, for what the
        read-only bookie must still write. Returns the bytes released (0 if none were held)."""
        with self._lock:
            released = 0
            for r in self._reserves:
                try:
                    released += r.release()
                except OSError as e:  # a failing disk: the write that found no space says more
                    log.warning("could not release the reserved space %s: %s", r.path, e)
            return released

    def refill(self) -> None:
        """Take each missing reserve back (after a release, or at start) where the filesystem
        stays below the threshold with it; where it would not, the reserve stays missing (and
        counts as used, so the bookie stays or turns read-only). Blocking."""
        with self._lock:
            for r in self._reserves:
                usage = shutil.disk_usage(r.directory)
                target = self.target(usage.total)
                missing = target - r.held()
                if missing <= 0:
                    continue
                if usage.total and 1.0 - (usage.free - missing) / usage.total >= self.threshold:
                    continue
                if r.fill(target):
                    log.info("reserved %d bytes in %s for fences and recovery on a full disk", target, r.path)

    def measure(self) -> DiskUsage:
        """The fullest of the bookie's filesystems, each with its missing reserve counted as
        used. Blocking (statvfs)."""
        fullest: DiskUsage | None = None
        for r in self._reserves:
            usage = shutil.disk_usage(r.directory)
            missing = max(0, self.target(usage.total) - r.held())
            this = DiskUsage(total=usage.total, free=max(0, usage.free - missing), path=r.directory)
            if fullest is None or this.fraction > fullest.fraction:
                fullest = this
        assert fullest is not None, "a bookie writes at least its data dir"
        return fullest

    def measure_and_refill(self) -> DiskUsage:
        """:meth:`refill` where there is room, then :meth:`measure`: what the disk check runs."""
        self.refill()
        return self.measure()
