"""A test-only layer that makes chosen writes fail, armed at run time from a control dir.

Inside a bookie process started with ``BKFRAME_WRITE_FAULTS=CONTROL_DIR``, ``os.write``,
``os.pwrite`` and ``os.posix_fallocate`` (and ``os.fsync`` / ``os.fdatasync``) look in
``CONTROL_DIR`` before each call. A test arms a fault by creating a file there whose content is a substring of the
paths it applies to (e.g. ``/entrylogs/``), and disarms it by deleting the file:

* ``enospc``: the next write to a matching file writes only half its bytes (a short
  write, as at the edge of a full disk) and every later one fails with ``ENOSPC``, as
  does every ``posix_fallocate``;
* ``eio``: the same with ``EIO``, a failing disk rather than a full one (a bookie answers
  that with IO_ERROR and stays writable; a full disk makes it read-only);
* ``hang-sync``: an fsync or fdatasync of a matching file never returns, as if the disk
  stopped answering (the process can only be killed) -- for the state where a write was
  handed to the page cache but its sync never completed;
* ``drop-sync``: an fsync or fdatasync of a matching file returns at once without syncing,
  like a disk whose volatile write cache drops what it was told to flush. With the
  power-loss layer (:mod:`bkframe.testing.faults.powerloss`) a power cut then loses those writes
  while other files' later syncs survive: e.g. index pages that reached the disk before
  the entry-log pages they point to.

Whole-disk-full tests have a layer of their own; this one is for precise, single-write
faults. A look at the control dir per write: not for production.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CONTROL_ENV = "BKFRAME_WRITE_FAULTS"
ENOSPC_FILE = "enospc"
EIO_FILE = "eio"
HANG_SYNC_FILE = "hang-sync"
DROP_SYNC_FILE = "drop-sync"

#: What an armed write fails with: (control file, errno, message).
WRITE_FAULTS = ((ENOSPC_FILE, errno.ENOSPC, "No space left on device"), (EIO_FILE, errno.EIO, "Input/output error"))

class _Layer:
    def __init__(self, control: Path) -> None:
        self.control = control
        self._lock = threading.Lock()
        #: The short write of the current ``enospc`` arming was made.
        self._short_done = False

    def _armed(self, name: str, fd: int) -> bool:
        try:
            pattern = (self.control / name).read_text().strip()
        except FileNotFoundError:
            if name in (ENOSPC_FILE, EIO_FILE) and not any((self.control / n).exists() for n in (ENOSPC_FILE, EIO_FILE)):
                self._short_done = False
            return False
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return False
        return pattern in path

    def write_size(self, fd: int, size: int) -> int:
        """How many of ``size`` bytes a write may write; raises ENOSPC or EIO when armed to."""
        if size == 0:
            return size
        armed = [(code, text) for name, code, text in WRITE_FAULTS if self._armed(name, fd)]
        if not armed:
            return size
        code, text = armed[0]
        with self._lock:
            if not self._short_done:
                self._short_done = True
                return max(1, size // 2)
        raise OSError(code, f"{text} (injected by bkframe.testing.faults.write_faults)")

    def before_allocate(self, fd: int) -> None:
        if self._armed(ENOSPC_FILE, fd):
            raise OSError(errno.ENOSPC, "No space left on device (injected by bkframe.testing.faults.write_faults)")

    def sync_allowed(self, fd: int) -> bool:
        """Whether a sync may go ahead (False: skip it); never returns when armed to hang."""
        if self._armed(HANG_SYNC_FILE, fd):
            while True:  # the disk never answers; only SIGKILL ends this
                time.sleep(3600)
        return not self._armed(DROP_SYNC_FILE, fd)


def install_from_env() -> bool:
    """Wrap the os functions above if the environment asks for it; return whether it did."""
    control = os.environ.get(CONTROL_ENV)
    if not control:
        return False
    layer = _Layer(Path(control))
    real_write, real_pwrite = os.write, os.pwrite
    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    real_fallocate = os.posix_fallocate

    def write(fd: int, data: Any) -> int:
        view = memoryview(data)
        return real_write(fd, view[: layer.write_size(fd, view.nbytes)])

    def pwrite(fd: int, data: Any, offset: int) -> int:
        view = memoryview(data)
        return real_pwrite(fd, view[: layer.write_size(fd, view.nbytes)], offset)

    def posix_fallocate(fd: int, offset: int, length: int) -> None:
        layer.before_allocate(fd)
        real_fallocate(fd, offset, length)

    def synced(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            if layer.sync_allowed(fd):
                real(fd)

        return sync

    os.write = write
    os.pwrite = pwrite
    os.posix_fallocate = posix_fallocate
    os.fsync = synced(real_fsync)  # type: ignore[assignment]  # the bookie passes ints
    os.fdatasync = synced(real_fdatasync)  # type: ignore[assignment]
    return True
