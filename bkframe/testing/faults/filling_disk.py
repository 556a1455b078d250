"""A filesystem layer that can "fill up": writes under the data dir fail with ENOSPC once
a byte budget is used, and the disk-usage measurement agrees.

Inside a bookie process started with ``BKFRAME_DISKFULL_ROOT=DATA_DIR`` and
``BKFRAME_DISKFULL_CAPACITY=FILE`` (a file holding a number of bytes), the data dir
behaves as if it were a filesystem of that size of its own:

* its *used* bytes are the sizes of the regular files under it, each rounded up to 4 KiB
  blocks (sparse regions count as allocated: the layer is never more generous than a real
  disk);
* ``os.write``, ``os.pwrite``, ``os.ftruncate`` and ``os.posix_fallocate`` on a file under
  it fail with ``ENOSPC`` when they would grow it past the capacity. A write that does not
  fit fails whole (a real disk may first write part of it: that short write is not
  simulated here); shrinking and overwriting always work;
* ``shutil.disk_usage`` of a path under it answers ``(capacity, used, capacity - used)``,
  so the bookie's disk check sees the same full disk its writes hit.

The capacity file is read again as soon as it changes (a stat per write), so a test gives
the bookie more (or less) space at run time with :func:`set_capacity`. Deleting files frees
space as on a real disk (the used bytes are recounted at least every :data:`REFRESH_S` and
before any write is refused). Writes through mmap are not seen (the default ledger storage
allocates its index files with ``posix_fallocate``, which is). Not for production.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT_ENV = "BKFRAME_DISKFULL_ROOT"
CAPACITY_ENV = "BKFRAME_DISKFULL_CAPACITY"
BLOCK = 4096
#: The used bytes are recounted (a walk of the data dir) at most this long after the last count.
REFRESH_S = 0.05


class DiskUsage(NamedTuple):
    """Same fields as ``shutil.disk_usage``'s answer."""

    total: int
    used: int
    free: int


def set_capacity(path: Path, capacity: int) -> None:
    """Write ``capacity`` (bytes) to a capacity file atomically (the bookie may read it any time)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{int(capacity)}\n")
    os.replace(tmp, path)


def used_bytes(root: Path) -> int:
    """What the layer counts as used under ``root``: file sizes rounded up to blocks."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue  # removed while walking
            if stat.S_ISREG(st.st_mode):
                total += _blocks(st.st_size)
    return total


def _blocks(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


class _Disk:
    def __init__(self, root: Path, capacity_file: Path) -> None:
        self.root = root.resolve()
        self.capacity_file = capacity_file
        self._lock = threading.Lock()
        self._capacity = 0
        self._capacity_stamp: tuple[int, int] | None = None
        self._used = 0
        self._counted_at = -1.0
        #: fd -> (st_dev, st_ino, whether the file is under root); checked against fstat
        #: so a reused fd number is looked up again.
        self._fds: dict[int, tuple[int, int, bool]] = {}

    def _capacity_changed(self) -> bool:
        try:
            st = os.stat(self.capacity_file)
        except OSError:
            return False
        return (st.st_ino, st.st_mtime_ns) != self._capacity_stamp

    def _recount(self) -> None:
        try:
            st = os.stat(self.capacity_file)
            self._capacity = int(self.capacity_file.read_text().strip())
            self._capacity_stamp = (st.st_ino, st.st_mtime_ns)
        except (OSError, ValueError):
            pass  # keep the last good value (a test may be rewriting it)
        self._used = used_bytes(self.root)
        self._counted_at = time.monotonic()

    def usage(self) -> DiskUsage:
        with self._lock:
            self._recount()
            return DiskUsage(self._capacity, self._used, max(0, self._capacity - self._used))

    def _ours(self, fd: int, st: os.stat_result) -> bool:
        known = self._fds.get(fd)
        if known is not None and known[:2] == (st.st_dev, st.st_ino):
            return known[2]
        try:
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            ours = stat.S_ISREG(st.st_mode) and path.is_relative_to(self.root)
        except OSError:
            ours = False
        self._fds[fd] = (st.st_dev, st.st_ino, ours)
        return ours

    def grow(self, fd: int, offset: int | None, length: int) -> None:
        """Account for ``length`` bytes written at ``offset`` (None: the fd's position) of the
        file at ``fd``, or raise ENOSPC if they do not fit."""
        try:
            st = os.fstat(fd)
        except OSError:
            return  # a bad fd: let the real call report it
        with self._lock:
            if not self._ours(fd, st):
                return
            if offset is None:
                offset = os.lseek(fd, 0, os.SEEK_CUR)
            growth = _blocks(max(offset + length, st.st_size)) - _blocks(st.st_size)
            if growth <= 0:
                return
            if (
                time.monotonic() - self._counted_at > REFRESH_S
                or self._used + growth > self._capacity
                or self._capacity_changed()
            ):
                self._recount()  # deletions since the last count, or a new capacity
            if self._used + growth > self._capacity:
                raise OSError(
                    errno.ENOSPC,
                    f"No space left on device (bkframe.testing.faults.filling_disk: {self._used} of "
                    f"{self._capacity} bytes used under {self.root})",
                )
            self._used += growth

    def covers(self, path: Any) -> bool:
        try:
            return Path(os.fspath(path)).resolve().is_relative_to(self.root)
        except (TypeError, OSError):
            return False


def install_from_env() -> bool:
    """Wrap the os write calls and shutil.disk_usage if the environment asks; return whether it did."""
    root = os.environ.get(ROOT_ENV)
    capacity = os.environ.get(CAPACITY_ENV)
    if not root or not capacity:
        return False
    disk = _Disk(Path(root), Path(capacity))
    real_write, real_pwrite = os.write, os.pwrite
    real_ftruncate, real_fallocate = os.ftruncate, os.posix_fallocate
    real_disk_usage = shutil.disk_usage

    def write(fd: int, data: Any) -> int:
        disk.grow(fd, None, memoryview(data).nbytes)
        return real_write(fd, data)

    def pwrite(fd: int, data: Any, offset: int) -> int:
        disk.grow(fd, offset, memoryview(data).nbytes)
        return real_pwrite(fd, data, offset)

    def ftruncate(fd: int, length: int) -> None:
        # Only growth is checked; what a shrink frees is seen at the next recount.
        disk.grow(fd, 0, length)
        real_ftruncate(fd, length)

    def posix_fallocate(fd: int, offset: int, length: int) -> None:
        disk.grow(fd, offset, length)
        real_fallocate(fd, offset, length)

    def disk_usage(path: Any) -> Any:
        if disk.covers(path):
            return disk.usage()
        return real_disk_usage(path)

    os.write = write
    os.pwrite = pwrite
    os.ftruncate = ftruncate
    os.posix_fallocate = posix_fallocate
    shutil.disk_usage = disk_usage  # type: ignore[assignment]
    return True
