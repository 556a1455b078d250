"""Unclean-shutdown detection (BP-46): a marker file set at start, cleared on a clean stop.

A crash, SIGKILL or power cut leaves the marker behind, so the next start knows the last
shutdown was not clean and that writes not yet fsynced may be gone.
"""

from __future__ import annotations

import os
from pathlib import Path

from bkframe.storage_kit.disk_full import DISK_FULL_ERRNOS
from bkframe.storage_kit.fsync import remove_durably, write_durably

MARKER = "UNCLEAN_SHUTDOWN"


def mark_running(data_dir: Path) -> bool:
    """Set the marker durably; return whether the previous shutdown was clean."""
    path = data_dir / MARKER
    clean = not path.exists()
    try:
        write_durably(path, f"pid {os.getpid()}\n".encode())
    except OSError as e:
        # The marker is its existence; the pid only helps people. On a full disk (a
        # bookie must still start there, read-only) an empty marker, which needs no
        # data block, does.
        if e.errno not in DISK_FULL_ERRNOS:
            raise
        write_durably(path, b"")
    return clean


def mark_clean(data_dir: Path) -> None:
    """Clear the marker durably, after everything else is flushed."""
    remove_durably(data_dir / MARKER)
