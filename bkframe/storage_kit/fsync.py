"""Durable file updates in one place: the ordering that makes them survive a crash (write,
fsync, rename, fsync the directory) is written once, here, for the core and for storage
plugins. Blocking: call them off the event loop where they may wait on the disk."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def fsync_dir(directory: Path) -> None:
    """Make creations, renames and deletions of the directory's entries durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_files(fds: Sequence[int], directory: Path | None = None) -> int:
    """fsync every fd, then ``directory`` if given; return how many fsyncs were made."""
    for fd in fds:
        os.fsync(fd)
    if directory is not None:
        fsync_dir(directory)
    return len(fds) + (1 if directory is not None else 0)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a short write, as on a full disk's edge, is continued or raises)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content,
    whole: write a temporary file completely, fsync it, rename it over ``path``, fsync the
    directory. On failure the temporary file is removed (on a full disk it would take space)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def append_durably(path: Path, data: bytes, *, room: int = 0) -> None:
    """Append ``data`` to ``path`` (created if missing) and fsync it, and the directory if
    the file is new. If the write fails, the file is cut back to where it was: no partial
    record is left behind for the next append to follow. ``room``: then keep that many
    bytes allocated past the end (:func:`keep_room`), for appends on a full disk."""
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)
            raise
        keep_room(fd, room)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def _libc_function(name: str) -> Any:
    """The C library's ``name``, or None. Looked up among the symbols the process has loaded
    (libc's among them): ``ctypes.util.find_library`` would run ``ldconfig -p`` twice at
    every import, ~40 ms of each process's start, a one-shot CLI command's included."""
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name, None)
    except OSError:  # a platform without dlopen(NULL)
        return None


def _fallocate() -> Any:
    fn = _libc_function("fallocate")
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return fn


_FALLOCATE = _fallocate()
#: fallocate(2): allocate without changing the file's size.
_FALLOC_FL_KEEP_SIZE = 1


def keep_room(fd: int, length: int) -> bool:
    """Keep ``length`` bytes allocated past the end of the file (``fallocate(2)`` with
    ``FALLOC_FL_KEEP_SIZE``: its size stays), so that appends of up to that much succeed
    on a disk that has filled up since -- on tmpfs and ext4 an append into such blocks
    needs no new ones. Best effort: False where there is no room for it, or no such call."""
    if _FALLOCATE is None or length <= 0:
        return False
    return bool(_FALLOCATE(fd, _FALLOC_FL_KEEP_SIZE, os.fstat(fd).st_size, length) == 0)


def remove_durably(path: Path) -> None:
    """Delete ``path`` (if there) and make the deletion durable."""
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)


def _syncfs() -> object | None:
    fn: object | None = _libc_function("syncfs")
    return fn


_SYNCFS = _syncfs()


def sync_tree(directory: Path) -> int:
    """Make every file under ``directory`` durable (what an earlier run of the process left
    in the page cache); return how many syncs were made. One ``syncfs(2)`` of its
    filesystem where there is one -- a fixed cost, where fsyncing 10^5 index files one by
    one takes tens of seconds -- else :func:`fsync_tree`. (Test layers that must see each
    file's fsync replace this function with :func:`fsync_tree`.)"""
    if _SYNCFS is None:
        return fsync_tree(directory)
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _SYNCFS(fd) != 0:  # type: ignore[operator]
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs of {directory}: {os.strerror(err)}")
    finally:
        os.close(fd)
    return 1


def fsync_tree(directory: Path) -> int:
    """fsync every file and directory under ``directory`` (what an earlier run of the process
    left in the page cache); return how many fsyncs were made."""
    count = 0
    for dirpath, _, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            count += 1
        fsync_dir(Path(dirpath))
        count += 1
    return count
