"""Which errors mean "no space left": for the core and for storage plugins, which must
survive a full disk (fail the write, keep their files usable) rather than stop."""

from __future__ import annotations

import errno

#: errno values of a write that failed for want of space (the disk, or a quota).
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error``, or an error that caused it, is a write that found no space left."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return True
        e = e.__cause__ or e.__context__
    return False
