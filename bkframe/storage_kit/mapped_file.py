"""A file written through a shared mapping on a disk that can fill: a full disk must be an
``OSError`` (ENOSPC), never a SIGBUS that kills the bookie.

Touching a page of a ``MAP_SHARED`` mapping that the filesystem cannot back raises no
exception: the kernel sends SIGBUS and the process dies. Writing a hole of a sparse file
needs a block at the page fault; on tmpfs (and a Kubernetes memory-backed ``emptyDir``)
even *reading* a hole allocates a page. So a storage that maps files keeps three rules,
which :class:`MappedFile` keeps for it:

* **Allocate before writing**: ``posix_fallocate`` every page (whole pages: a filesystem
  with blocks smaller than a page needs all of the page's blocks at the fault) before the
  first write to it through the mapping. A full disk then fails the allocation with ENOSPC,
  which the caller reports like any failed write.
* **Read through the mapping only what is allocated**, else with ``pread``, which reads
  holes as zeros without allocating anything and sees every write made through the
  mapping (one page cache).
* **Growing allocates nothing**: ``ftruncate`` makes a sparse tail, and the page that held
  the old end may lack blocks past it, so it is allocated again before it is written.

Only allocations made by this object count: a file opened again may have holes anywhere
(an earlier run grew it sparse), and allocating a page that is already allocated is cheap
and needs no space.
"""

from __future__ import annotations

import mmap
import os

PAGE = mmap.PAGESIZE


class MappedFile:
    """A read-write shared mapping of the whole file ``fd`` (which the caller owns and closes
    after :meth:`close`), with the pages this object allocated.

    Write or read through :attr:`mapping` only bytes that :meth:`covers` (what
    :meth:`allocate` allocated); read anything else with :meth:`pread`. ``allocated``:
    bytes from the start known to be allocated already (the caller just allocated them,
    e.g. a file it made with ``posix_fallocate``).
    """

    def __init__(self, fd: int, *, allocated: int = 0) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.mapping = self._map()
        #: Allocated byte ranges ``[start, end)``, sorted and disjoint; each starts on a page
        #: boundary and ends on one or at the end of the file as it was then.
        self._allocated: list[tuple[int, int]] = [(0, min(allocated, self.size))] if allocated > 0 else []

    def _map(self) -> mmap.mmap:
        return mmap.mmap(self.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def covers(self, start: int, end: int) -> bool:
        """Whether bytes ``start..end`` (exclusive) lie in pages this object allocated."""
        for a, b in self._allocated:
            if a <= start and end <= b:
                return True
            if a > start:
                break
        return False

    def allocate(self, start: int, end: int, *, ahead: int = 0) -> None:
        """Make bytes ``start..end`` (within the file) safe to write through the mapping:
        allocate their pages unless already done, and ``ahead`` bytes more (up to the end of
        the file) so that the next writes further on need no call. Raises OSError (ENOSPC,
        EDQUOT on a full disk) with nothing changed in the mapping."""
        if self.covers(start, end):
            return
        start -= start % PAGE
        target = min(self.size, max(end, start + ahead))
        target = min(self.size, target + (-target % PAGE))
        os.posix_fallocate(self.fd, start, target - start)
        self._add(start, target)

    def allocate_pages(self, offsets: list[int]) -> None:
        """:meth:`allocate` the page of each byte offset in ``offsets`` (ascending), one call
        per run of adjacent pages not allocated yet."""
        run: tuple[int, int] | None = None
        for at in offsets:
            page = at - at % PAGE
            if self.covers(at, at + 1):
                continue
            if run is not None and page <= run[1]:
                run = (run[0], max(run[1], page + PAGE))
                continue
            if run is not None:
                self.allocate(run[0], min(run[1], self.size))
            run = (page, page + PAGE)
        if run is not None:
            self.allocate(run[0], min(run[1], self.size))

    def _add(self, start: int, end: int) -> None:
        merged: list[tuple[int, int]] = []
        for a, b in self._allocated:
            if b < start or a > end:
                merged.append((a, b))
            else:
                start, end = min(a, start), max(b, end)
        merged.append((start, end))
        merged.sort()
        self._allocated = merged

    def grow(self, size: int) -> None:
        """Extend the file to ``size`` (sparse: nothing allocated) and map all of it. The old
        mapping is dropped, not closed: a thread may still be flushing it, and arrays may
        still point into it."""
        if size <= self.size:
            return
        old = self.size
        os.ftruncate(self.fd, size)
        self.size = size
        self.mapping = self._map()
        # The page holding the old end now reaches past it, onto blocks nobody allocated:
        # a range that ended there ends at that page's start now.
        cut = old - old % PAGE
        clipped = [(a, b if b % PAGE == 0 else cut) for a, b in self._allocated]
        self._allocated = [(a, b) for a, b in clipped if b > a]

    def pread(self, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer past the end of the file), read without
        touching the mapping."""
        chunks = []
        while length > 0:
            chunk = os.pread(self.fd, length, start)
            if not chunk:
                break
            chunks.append(chunk)
            start += len(chunk)
            length -= len(chunk)
        return b"".join(chunks) if len(chunks) != 1 else chunks[0]

    def flush(self) -> None:
        """msync the mapping (blocking: call from a worker thread)."""
        self.mapping.flush()
