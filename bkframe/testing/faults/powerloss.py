"""A filesystem layer that can "lose power": only what was fsynced survives.

Inside a bookie process started with ``BKFRAME_POWERLOSS_SHADOW=DIR`` (and
``BKFRAME_POWERLOSS_ROOT=DATA_DIR``), every ``os.fsync`` / ``os.fdatasync`` of a file
under the data dir copies that file's content into the shadow dir: the shadow holds
exactly what a power cut would leave. A directory fsync also drops from the shadow the
files deleted from the directory and moves the synced copy of a file renamed into it
(its content was synced under the old name); a new file never fsynced stays out. After
killing the bookie, :func:`lose_power` replaces the data dir with the shadow, so a restart
sees real data loss.

Copying whole files at each fsync is slow: use it with small files (e.g. the journal's
``preallocate_bytes = 0``) in tests. Not for production.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

SHADOW_ENV = "BKFRAME_POWERLOSS_SHADOW"
ROOT_ENV = "BKFRAME_POWERLOSS_ROOT"


class _Shadow:
    def __init__(self, root: Path, shadow: Path) -> None:
        self.root = root.resolve()
        self.shadow = shadow
        shadow.mkdir(parents=True, exist_ok=True)
        #: Which shadow file holds the synced content of each inode (to follow renames).
        self._inodes: dict[tuple[int, int], Path] = {}
        #: ...and which inode each shadow file holds now: inode numbers are reused once a file
        #: is deleted or replaced, so a stale entry above must not move another file's copy.
        self._owners: dict[Path, tuple[int, int]] = {}
        #: fsyncs come from several threads (each journal's writer, the checkpoint): one
        #: shadow update at a time, or a directory fsync could drop a file another thread
        #: is moving into place (a checkpoint's LastLogMark).
        self._lock = threading.Lock()

    def _relative(self, path: Path) -> Path | None:
        try:
            return path.resolve().relative_to(self.root)
        except ValueError:
            return None

    def synced(self, fd: int) -> None:
        with self._lock:
            self._synced(fd)

    def _synced(self, fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        rel = self._relative(path)
        if rel is None:
            return
        mode = os.fstat(fd).st_mode
        target = self.shadow / rel
        if stat.S_ISDIR(mode):
            target.mkdir(parents=True, exist_ok=True)
            present = {p.name for p in path.iterdir()}
            for name in present:
                real = path / name
                if not real.is_file():
                    continue
                st = real.stat()
                key = (st.st_dev, st.st_ino)
                synced_as = self._inodes.get(key)
                if (
                    synced_as is not None
                    and synced_as != target / name
                    and self._owners.get(synced_as) == key
                    and synced_as.exists()
                ):
                    # Renamed in after its content was synced under another name -- also
                    # over an older file of this name (write_durably's rename).
                    os.replace(synced_as, target / name)
                    del self._owners[synced_as]
                    self._inodes[key] = target / name
                    self._owners[target / name] = key
            for entry in list(target.iterdir()):
                if entry.name not in present and entry.is_file():
                    entry.unlink()  # its deletion is now durable
                    self._owners.pop(entry, None)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".powerloss-tmp")
        shutil.copyfile(path, tmp)  # by path: the fd may be write-only
        os.replace(tmp, target)
        st = os.fstat(fd)
        self._inodes[(st.st_dev, st.st_ino)] = target
        self._owners[target] = (st.st_dev, st.st_ino)


def install_from_env() -> bool:
    """Wrap os.fsync/os.fdatasync if the environment asks for it; return whether it did."""
    shadow = os.environ.get(SHADOW_ENV)
    root = os.environ.get(ROOT_ENV)
    if not shadow or not root:
        return False
    layer = _Shadow(Path(root), Path(shadow))
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        layer.synced(fd)

    def fdatasync(fd: int) -> None:
        real_fdatasync(fd)
        layer.synced(fd)

    os.fsync = fsync  # type: ignore[assignment]
    os.fdatasync = fdatasync  # type: ignore[assignment]
    # A syncfs would make everything durable unseen: sync file by file, through the wrapper.
    from bkframe.storage_kit import fsync as fsync_module

    fsync_module.sync_tree = fsync_module.fsync_tree  # type: ignore[assignment]
    return True


def lose_power(data_dir: Path, shadow: Path) -> None:
    """After the bookie was killed: keep only what was fsynced."""
    shutil.rmtree(data_dir)
    if shadow.exists():
        shutil.copytree(shadow, data_dir)
    else:
        data_dir.mkdir(parents=True)
    for leftover in data_dir.rglob("*.powerloss-tmp"):
        leftover.unlink()
