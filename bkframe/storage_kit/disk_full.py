"""Which errors mean "no space left": for the core and for storage plugins, which must
survive a full disk (fail the write, keep their files usable) rather than stop."""

from __future__ import annotations

import errno
from collections.abc import Collection

#: errno values of a write that failed for want of space (the disk, or a quota).
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def caused_by_errno(error: BaseException, errnos: Collection[int]) -> bool:
    """Whether ``error``, or an error that caused it, is an OSError with one of ``errnos``."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in errnos:
            return True
        e = e.__cause__ or e.__context__
    return False


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error``, or an error that caused it, is a write that found no space left."""
    return caused_by_errno(error, DISK_FULL_ERRNOS)
