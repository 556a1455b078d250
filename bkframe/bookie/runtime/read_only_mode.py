"""BookKeeper's read-only mode, and what switches it: how full the data dir's filesystem
is, or a write that found no space (recognized by :mod:`bkframe.storage_kit.disk_full`).

Read-only mode (BookKeeper's ``diskUsageThreshold`` / ``diskUsageLwm``): once the used
fraction of the filesystem reaches the threshold, or a write fails for want of space, the
bookie takes no more adds (they get ``READ_ONLY``, so writers change ensemble) and
registers read-only (new ledgers avoid it). It keeps serving reads, fences and recovery
adds, so that ledgers it holds can still be read and closed. It takes adds again once the
used fraction is below the low-water mark; the gap between the two marks keeps it from
flapping. A write that found no space also releases the bookie's reserved space
(:mod:`.space_reserve`) for those duties; until it is taken back, it counts as used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import trio

from bkframe.bookie.runtime.space_reserve import DiskUsage, SpaceReserve
from bkframe.errors import BKError
from bkframe.storage_kit.disk_full import is_disk_full

T = TypeVar("T")

log = logging.getLogger("bkframe.bookie")


class NoSpaceToStartError(BKError, OSError):
    """The bookie cannot start: something it must write before serving found no space."""


class ReadOnlyMode:
    """Whether the bookie takes adds, and why not. Lives on the event loop."""

    def __init__(self, data_dir: Path, threshold: float, lwm: float, reserve: SpaceReserve | None = None) -> None:
        self.data_dir = data_dir
        self.threshold = threshold
        self.lwm = lwm
        self.read_only = False
        #: Why the bookie is read-only (empty while writable).
        self.reason = ""
        #: The last measurement, if any.
        self.usage: DiskUsage | None = None
        #: Set (and replaced) whenever ``read_only`` changes, for whoever publishes it.
        self.changed = trio.Event()
        #: Decommissioned: read-only whatever the disk, until no longer decommissioned.
        self.draining = False
        #: Space kept back for fences and recovery adds, released when a write finds none.
        self.reserve = reserve

    def disk_checked(self, usage: DiskUsage) -> None:
        """Apply one measurement: enter read-only at the threshold, leave below the low-water mark."""
        self.usage = usage
        if usage.fraction >= self.threshold:
            if not self.read_only:
                self._set(
                    True,
                    f"disk usage of {usage.path or self.data_dir} is {usage.fraction:.1%}, at or above "
                    f"disk_usage_threshold {self.threshold:.0%} ({usage.free} of {usage.total} bytes free)",
                )
        elif self.read_only and usage.fraction < self.lwm and not self.draining:
            self._set(
                False, f"disk usage of {usage.path or self.data_dir} is {usage.fraction:.1%}, below disk_usage_lwm {self.lwm:.0%}"
            )

    def set_draining(self, draining: bool) -> None:
        """Decommissioned (or no longer): no adds, so that writers move their ledgers off
        this bookie; reads, fences and recovery adds go on (autorecovery copies from it)."""
        if draining == self.draining:
            return
        self.draining = draining
        if draining and not self.read_only:
            self._set(True, "the bookie is decommissioned: its ledgers are being copied away")
        elif not draining and self.read_only and (self.usage is None or self.usage.fraction < self.lwm):
            self._set(False, "the bookie is no longer decommissioned")

    def write_failed(self, error: BaseException) -> int:
        """A write found no space left: read-only at once, until usage is below the low-water
        mark, and the reserved space released for what a read-only bookie must still write.
        Returns the bytes released now (0: none was held)."""
        if not self.read_only:
            self._set(True, f"a write to {self.data_dir} failed: {error}")
        released = self.reserve.release() if self.reserve is not None else 0
        if released:
            log.warning(
                "released %d bytes of reserved space for fences and recovery adds; the bookie takes it back "
                "before it takes adds again", released,
            )
        return released

    def again_if_released(self, write: Callable[[], T], on_again: Callable[[], None] | None = None) -> T:
        """``write()``; if it found no space and that released reserved space (see
        :meth:`write_failed`), ``write()`` once more, into that room (``on_again`` is told).
        For the writes a read-only bookie must still make: a failed one must have left
        nothing behind, so that the second is whole. On the event loop."""
        try:
            return write()
        except Exception as e:
            if not (is_disk_full(e) and self.write_failed(e)):
                raise
        if on_again is not None:
            on_again()
        return write()

    def _set(self, read_only: bool, why: str) -> None:
        self.read_only = read_only
        self.reason = why if read_only else ""
        if read_only:
            log.warning("bookie is read-only: %s; it refuses adds until usage is below disk_usage_lwm %.0f%%",
                        why, self.lwm * 100)
        else:
            log.warning("bookie is writable again: %s", why)
        changed, self.changed = self.changed, trio.Event()
        changed.set()
