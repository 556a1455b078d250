"""Running out of file descriptors: how storage plugins tell it from a failing disk.

A bookie holding many ledgers keeps only a bounded number of files open (its open-index and
entry-log caches); when the process still meets its ``ulimit -n`` (EMFILE) or the system's
file table is full (ENFILE), a cache closes what it can and tries again. If that is not
enough, :class:`OutOfFilesError` says so: the bookie answers TOO_MANY_REQUESTS (try later,
or another bookie), never IO_ERROR, since nothing is wrong with the data or the disk.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TypeVar

from bkframe.errors import BKError
from bkframe.storage_kit.disk_full import caused_by_errno

#: errno values of an open (or mmap, socket, pipe) that found no free file descriptor.
OUT_OF_FILES_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})

T = TypeVar("T")


class OutOfFilesError(BKError, OSError):
    """The process has no file descriptor left even after closing what its caches could:
    the request can be tried again later; raise ``ulimit -n`` or lower the caches' limits."""


def is_out_of_files(error: BaseException) -> bool:
    """Whether ``error``, or an error that caused it, is a lack of file descriptors."""
    return caused_by_errno(error, OUT_OF_FILES_ERRNOS)


def open_or_evict(opener: Callable[[], T], evict: Callable[[], int], what: str) -> T:
    """``opener()``; if it finds no file descriptor, ``evict()`` (close what a cache can;
    it returns how many it closed) and try once more. Raises :class:`OutOfFilesError` if
    there is still none."""
    try:
        return opener()
    except OSError as e:
        if e.errno not in OUT_OF_FILES_ERRNOS:
            raise
        closed = evict()
    try:
        return opener()
    except OSError as e:
        if e.errno not in OUT_OF_FILES_ERRNOS:
            raise
        raise OutOfFilesError(
            e.errno,
            f"cannot open {what}: no file descriptor left ({e.strerror}) after closing {closed} cached "
            f"files; retry later, and raise the bookie's `ulimit -n` or lower its open-file cache limits",
        ) from e
