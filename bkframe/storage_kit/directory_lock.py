"""One process per directory: an exclusive OS lock on every directory a bookie (or the
sandbox) writes, held for the process's whole life.

Two processes on one data dir or journal dir destroy each other's work without either
noticing: the second replays the first's journal, calls its shutdown unclean, fences and
puts in limbo its open ledgers, and removes journal files it still writes. Kafka locks each
log dir (``.lock``) and etcd its WAL for exactly this; so does bkframe, the same way.

**How.** ``flock(LOCK_EX | LOCK_NB)`` on a file ``.lock`` inside the directory, then the
holder's pid written into it (after the lock is taken, so a refused process never changes
it) for the refused one to name. The lock belongs to the open file, not to the file on disk:
it goes when the holder exits however it exits (a ``kill -9`` too), so a stale ``.lock``
left behind never blocks a start; nothing is ever cleaned up by hand. flock, not
``fcntl``'s POSIX locks: those belong to the process and vanish when *any* descriptor of the
file is closed, and they do not conflict within one process, where two bookies on one
directory (a test's mistake) must be refused as well. The descriptor is not inherited by
processes the holder starts (Python's descriptors are close-on-exec).

Locks are taken before anything in the directory is read or written, in a fixed order, all
or nothing: a refused process releases what it took and leaves every directory as it was.
Blocking, but it never waits (a taken lock is refused at once): fine on the event loop at
start-up, as the rest of a bookie's construction is.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from bkframe.errors import BKError
from bkframe.storage_kit.disk_full import DISK_FULL_ERRNOS

#: The lock file inside each locked directory (Kafka's name).
LOCK_FILE = ".lock"


class DirectoryLockError(BKError):
    """A directory could not be locked: its filesystem has no locks (some network or FUSE
    filesystems), or another process holds it (:class:`DirectoryLockedError`)."""


class DirectoryLockedError(DirectoryLockError):
    """Another process holds the lock of a directory this one needs; nothing was changed.

    ``directory`` is the locked directory, ``pid`` the holder's (None if it could not be read).
    """

    def __init__(self, directory: Path, pid: int | None, message: str) -> None:
        super().__init__(message)
        self.directory = directory
        self.pid = pid


def holder_pid(directory: Path) -> int | None:
    """The pid written in ``directory``'s lock file (its holder's if it is held), or None."""
    try:
        text = (directory / LOCK_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _refusal(directory: Path, pid: int | None, user: str) -> str:
    if pid == os.getpid():
        who = f"this process (pid {pid}) already uses it" + (f", for another {user}" if user else "")
    elif pid is not None:
        who = f"another process (pid {pid}) is using it"
    else:
        who = "another process is using it (its pid is not in the lock file yet)"
    holder = f"pid {pid}" if pid is not None else "that process"
    instead = f", or give this {user} other directories" if user else ""
    return (
        f"directory {directory} is locked ({directory / LOCK_FILE}): {who}. Two processes on one directory "
        f"would destroy each other's data; stop {holder} first{instead}"
    )


class DirectoryLocks:
    """Exclusive locks on some directories, held until :meth:`release` (or the process's end).

    ``DirectoryLocks.acquire(dirs, user="bookie")`` makes each directory that is missing and
    locks them all, or raises :class:`DirectoryLockedError` (naming the directory and the
    holder's pid), or :class:`DirectoryLockError` where the filesystem has no locks, holding
    none. ``user`` names the kind of process in the refusal, which then suggests giving it
    other directories ("" for a command that must use these).
    """

    def __init__(self) -> None:
        #: (directory, its open lock file), in the order they were locked.
        self._held: list[tuple[Path, BinaryIO]] = []

    @classmethod
    def acquire(cls, directories: Iterable[Path], *, user: str = "bookie") -> DirectoryLocks:
        locks = cls()
        try:
            for directory in _distinct(directories):
                locks._lock(directory, user)
        except BaseException:
            locks.release()
            raise
        return locks

    def _lock(self, directory: Path, user: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOCK_FILE
        # Opened without truncating: the file is the holder's until the lock says otherwise.
        file = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+b", buffering=0)
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            pid = holder_pid(directory)
            raise DirectoryLockedError(directory, pid, _refusal(directory, pid, user)) from None
        except OSError as e:
            file.close()
            raise DirectoryLockError(
                f"cannot lock directory {directory} ({path}): {e.strerror or e}; its filesystem may not support "
                f"locks (flock): give a directory on a local filesystem"
            ) from None
        except BaseException:
            file.close()
            raise
        self._held.append((directory, file))
        try:
            file.truncate(0)
            file.write(f"{os.getpid()}\n".encode())
        except OSError as e:
            # The pid only helps the refused; the lock is the flock. A bookie must start on a
            # full disk (read-only), where even these few bytes may find no block.
            if e.errno not in DISK_FULL_ERRNOS:
                raise

    def release(self) -> None:
        """Unlock every directory (closing the file releases its flock); the files stay."""
        while self._held:
            _, file = self._held.pop()
            file.close()

    def __enter__(self) -> DirectoryLocks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _distinct(directories: Iterable[Path]) -> list[Path]:
    """``directories`` without repeats: one directory reached by two paths (a symlink, a
    relative path) is locked once, not refused as locked by this very process."""
    seen: set[Path] = set()
    out: list[Path] = []
    for d in directories:
        key = Path(os.path.realpath(d))
        if key not in seen:
            seen.add(key)
            out.append(Path(d))
    return out

