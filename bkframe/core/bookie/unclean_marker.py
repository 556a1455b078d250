"""Unclean-shutdown detection (BP-46): a marker file set at start, cleared on a clean stop.

A crash, SIGKILL or power cut leaves the marker behind, so the next start knows the last
shutdown was not clean and that writes not yet fsynced may be gone.
"""

from __future__ import annotations

import os
from pathlib import Path

from bkframe.core.disk_full import DISK_FULL_ERRNOS
from bkframe.core.fsync import fsync_dir

MARKER = "UNCLEAN_SHUTDOWN"


def mark_running(data_dir: Path) -> bool:
    """Set the marker durably; return whether the previous shutdown was clean."""
    path = data_dir / MARKER
    clean = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            os.write(fd, f"pid {os.getpid()}\n".encode())
        except OSError as e:
            # The marker is its existence; the pid only helps people. On a full disk
            # (a bookie must still start there, read-only) an empty marker does.
            if e.errno not in DISK_FULL_ERRNOS:
                raise
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(data_dir)
    return clean


def mark_clean(data_dir: Path) -> None:
    """Clear the marker durably, after everything else is flushed."""
    (data_dir / MARKER).unlink(missing_ok=True)
    fsync_dir(data_dir)
