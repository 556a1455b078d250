"""Real small filesystems for full-disk tests: a size-limited tmpfs, and an ext4 image on a
loop device (1 KiB blocks, so a page of a mapping spans several blocks, as on many small
disks).

The kernel's own ENOSPC, ``df`` and page faults, which the disk-full layer
(:mod:`bkframe.testing.faults.filling_disk`) cannot show: a mapped page the filesystem cannot back is
a SIGBUS there, not an error. Mounting needs root (or passwordless sudo); the
``small_filesystem`` fixture of :mod:`bkframe.testing.pytest_plugin` fails a test that
cannot mount under ``CI=true`` and skips it otherwise. Each filesystem lives under the
test's own temporary directory (its mount point and image), so parallel runs never meet.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

KINDS = ("tmpfs", "ext4")
#: Every command here is local and quick; a hung mount is a broken machine.
COMMAND_TIMEOUT_S = 60


class CannotMountError(Exception):
    """This machine cannot mount a small filesystem here (no root, no tools, no loop device)."""


def _sudo() -> list[str]:
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") is None or subprocess.run(
        ["sudo", "-n", "true"], capture_output=True, timeout=COMMAND_TIMEOUT_S
    ).returncode != 0:
        raise CannotMountError("mounting a small filesystem needs root or passwordless sudo")
    return ["sudo", "-n"]


class SmallFilesystem:
    """A mounted small filesystem at :attr:`path`. Use :func:`mount`; :meth:`unmount` at the end."""

    def __init__(self, kind: str, path: Path, image: Path | None, sudo: list[str]) -> None:
        self.kind = kind
        self.path = path
        self.image = image
        self._sudo = sudo
        self._fillers = 0

    def _run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*self._sudo, *cmd], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        if check and result.returncode != 0:
            raise CannotMountError(f"{' '.join(cmd)}: {result.stderr.strip() or result.returncode}")
        return result

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.path).free

    def fill(self, leave: int = 0, *, chunk: int = 64 * 1024) -> Path:
        """Someone else's file takes the free space but ``leave`` bytes (all of it by default:
        written until the filesystem says ENOSPC); returns it."""
        filler = self.path / f"filler-{self._fillers}"
        self._fillers += 1
        block = bytes(chunk)
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            while True:
                room = self.free_bytes() - leave
                if room <= 0:
                    break
                try:
                    os.write(fd, block[: min(chunk, room)])
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    if chunk == 1 or leave:
                        break
                    block, chunk = block[: chunk // 2], chunk // 2
            os.fsync(fd)  # ext4 allocates blocks of delayed writes now: df is final
        finally:
            os.close(fd)
        return filler

    def free(self) -> None:
        """Remove every filler file: the space comes back, nobody touched the bookie's files."""
        for filler in self.path.glob("filler-*"):
            filler.unlink()

    def resize(self, size: int) -> None:
        """Grow (or shrink) a tmpfs to ``size`` bytes while mounted (``mount -o remount``)."""
        if self.kind != "tmpfs":
            raise ValueError(f"only a tmpfs is resized here, not {self.kind}: free() its filler files instead")
        self._run("mount", "-o", f"remount,size={size}", str(self.path))

    def unmount(self) -> None:
        """Unmount (lazily: a killed process may still be closing files) and free the loop device."""
        loops = []
        if self.image is not None:
            listed = self._run("losetup", "-j", str(self.image), check=False).stdout
            loops = [line.split(":", 1)[0] for line in listed.splitlines() if line]
        self._run("umount", "-l", str(self.path), check=False)
        for loop in loops:
            self._run("losetup", "-d", loop, check=False)
        if self.image is not None:
            self.image.unlink(missing_ok=True)


def mount(kind: str, where: Path, size: int) -> SmallFilesystem:
    """Mount a ``kind`` filesystem (see KINDS) of ``size`` bytes at ``where`` (made if
    missing); an ext4 image goes next to it, as ``where.img``. Raises
    :class:`CannotMountError` saying why not."""
    if kind not in KINDS:
        raise ValueError(f"unknown filesystem kind {kind!r}; one of {', '.join(KINDS)}")
    if shutil.which("mount") is None:
        raise CannotMountError("no 'mount' command here")
    sudo = _sudo()
    where.mkdir(parents=True, exist_ok=True)
    image = None
    if kind == "tmpfs":
        fs = SmallFilesystem(kind, where, None, sudo)
        fs._run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))
    else:
        mkfs = shutil.which("mkfs.ext4") or shutil.which("mkfs.ext4", path="/sbin:/usr/sbin")
        if mkfs is None:
            raise CannotMountError("no mkfs.ext4 here (Debian's e2fsprogs)")
        image = where.with_name(where.name + ".img")
        with open(image, "wb") as f:
            f.truncate(size)
        fs = SmallFilesystem(kind, where, image, sudo)
        # No blocks reserved for root (the bookie runs as root in the suite: it would see a
        # fuller disk than df says), 1 KiB blocks, a journal small enough to leave room.
        fs._run(mkfs, "-q", "-F", "-m", "0", "-b", "1024", "-J", "size=1", str(image))
        try:
            fs._run("mount", "-o", "loop", str(image), str(where))
        except CannotMountError:
            image.unlink(missing_ok=True)
            raise
    if sudo:
        fs._run("chown", f"{os.getuid()}:{os.getgid()}", str(where))
    return fs
