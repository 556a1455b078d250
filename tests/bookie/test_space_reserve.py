"""The reserved space (bkframe.bookie.runtime.space_reserve) on real small filesystems: one
reserve per filesystem, its size, released when a write finds no space, counted as used
while missing (so the bookie cannot turn writable on the room it released), and taken back
once there is room. The bookie's use of it on real processes is in test_full_disk_recovery.py."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

import pytest

from bkframe.bookie.runtime.read_only_mode import ReadOnlyMode
from bkframe.bookie.runtime.space_reserve import RESERVE_FILE, SpaceReserve

MB = 1 << 20
NO_SPACE = OSError(errno.ENOSPC, "No space left on device")


def test_one_reserve_per_filesystem_sized_by_config_and_capped_by_the_filesystem(
    small_filesystem: Any, tmp_path: Path
) -> None:
    fs = small_filesystem("tmpfs", tmp_path / "small", 16 * MB)
    data, journal, other = tmp_path / "data", tmp_path / "data" / "journal", fs.path / "journal2"
    for d in (data, journal, other):
        d.mkdir(parents=True)
    reserve = SpaceReserve([data, journal, other], 64 * MB, threshold=0.95)
    # The data dir and its journal share a filesystem: one reserve there, one on the tmpfs.
    assert reserve.directories == [data, other]
    reserve.refill()
    # 64 MiB on the big disk; on 16 MiB, 2.5 % of it.
    assert (data / RESERVE_FILE).stat().st_size == 64 * MB
    assert (other / RESERVE_FILE).stat().st_size == reserve.target(16 * MB) == (16 * MB * 25 // 1000) // 4096 * 4096
    # Refilling a full reserve changes nothing; a threshold of 1.0 leaves no room for one.
    reserve.refill()
    assert reserve.held() == 64 * MB + reserve.target(16 * MB)
    assert SpaceReserve([data], 64 * MB, threshold=1.0).target(1 << 40) == 0
    assert SpaceReserve([data], 64 * MB, threshold=0.99).target(1000 * MB) == (5 * MB) // 4096 * 4096


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_released_on_a_full_disk_counted_as_used_while_missing_and_taken_back(
    kind: str, small_filesystem: Any, tmp_path: Path
) -> None:
    fs = small_filesystem(kind, tmp_path / "small", 16 * MB)
    data = fs.path / "data"
    data.mkdir()
    reserve = SpaceReserve([data], 64 * MB, threshold=0.95)
    mode = ReadOnlyMode(data, threshold=0.95, lwm=0.90, reserve=reserve)
    mode.disk_checked(reserve.measure_and_refill())
    held = reserve.held()
    assert held == reserve.target(shutil.disk_usage(data).total) > 0 and not mode.read_only
    fs.fill()  # someone else takes every free block
    assert fs.free_bytes() < 64 * 1024

    # A write found no space: read-only at once, and the reserve is the bookie's to use.
    assert mode.write_failed(NO_SPACE) == held
    assert mode.read_only and reserve.held() == 0
    assert fs.free_bytes() >= held - 64 * 1024
    assert mode.write_failed(NO_SPACE) == 0  # nothing more to release
    # The released room does not make it writable: it counts as used until taken back.
    usage = reserve.measure_and_refill()
    assert usage.fraction > 0.99 and reserve.held() == 0
    mode.disk_checked(usage)
    assert mode.read_only

    # Space returns: the reserve is taken back first, then the bookie is writable again.
    fs.free()
    usage = reserve.measure_and_refill()
    assert reserve.held() == held
    mode.disk_checked(usage)
    assert not mode.read_only


def test_not_taken_back_where_it_would_fill_the_disk_past_the_threshold(small_filesystem: Any, tmp_path: Path) -> None:
    fs = small_filesystem("tmpfs", tmp_path / "small", 16 * MB)
    data = fs.path / "data"
    data.mkdir()
    reserve = SpaceReserve([data], 64 * MB, threshold=0.95)
    # 96 % used by someone else: a bookie starting here starts read-only, reserve missing.
    fs.fill(leave=int(16 * MB * 0.04))
    usage = reserve.measure_and_refill()
    assert reserve.held() == 0
    assert usage.fraction >= 0.96
