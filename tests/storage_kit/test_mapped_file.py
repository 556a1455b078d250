"""bkframe.storage_kit.mapped_file: which bytes of a mapping count as allocated, so that a full disk
is an ENOSPC from posix_fallocate and never a SIGBUS at a page fault (the real filesystems
are in tests/bookie/test_disk_full_real_fs.py)."""

from __future__ import annotations

import os
from pathlib import Path

from bkframe.storage_kit.mapped_file import PAGE, MappedFile


def test_what_counts_as_allocated(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 4 * PAGE + 100)
        made = MappedFile(fd, allocated=4 * PAGE + 100)  # a file allocated whole when made
        assert made.covers(0, 4 * PAGE + 100) and not made.covers(0, 4 * PAGE + 101)
        opened = MappedFile(fd)  # opened again: nothing counts, whatever is on the disk
        assert not opened.covers(0, 16)
        opened.allocate(PAGE + 10, PAGE + 26)
        assert opened.covers(PAGE, 2 * PAGE) and not opened.covers(PAGE - 1, PAGE + 1)
        # Grown: the page that held the old end reaches onto blocks nobody allocated.
        made.grow(64 * PAGE)
        assert made.covers(0, 4 * PAGE) and not made.covers(4 * PAGE, 4 * PAGE + 16)
        assert len(made.mapping) == 64 * PAGE
        # Far ahead, and ahead of that (up to the end of the file).
        made.allocate(40 * PAGE + 5, 40 * PAGE + 21, ahead=100 * PAGE)
        assert made.covers(40 * PAGE, 64 * PAGE) and not made.covers(39 * PAGE, 40 * PAGE + 1)
        made.allocate_pages([4 * PAGE + 1, 5 * PAGE, 20 * PAGE + 3])
        assert made.covers(0, 6 * PAGE) and made.covers(20 * PAGE, 21 * PAGE) and not made.covers(6 * PAGE, 6 * PAGE + 1)
        # Reads never touch the mapping, and see what it wrote.
        made.mapping[5 * PAGE : 5 * PAGE + 3] = b"abc"
        assert made.pread(5 * PAGE, 3) == b"abc" and made.pread(64 * PAGE - 2, 10) == b"\0\0"
    finally:
        os.close(fd)
