"""fsync helpers shared by the core and storage plugins (blocking: call them off the event loop
where they may wait on the disk)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


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
