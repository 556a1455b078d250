"""Which of a log's segments the offload service moves to a tier now, and whose ledgers it
deletes from the bookies: the log's offload settings over the service's defaults.

A log's own settings (``log create`` / ``log configure``) win; a setting it leaves unset
takes the service's ``[offload]`` default (:class:`~bkframe.core.config.OffloadConfig`). A
log with no tier, its own or the default, is never offloaded by the service.

- **By age**: a closed segment is due once ``after_s`` has passed since its latest record
  time (as retention counts age: :meth:`~bkframe.client.logs.model.Segment.aged_at`).
- **By size**: while the closed segments not offloaded yet hold more than ``beyond_bytes``,
  the oldest of them are due, until what is left is within it.
- **Deletion**: an offloaded segment (by the service or by hand) whose ledger is still on
  the bookies goes off them once ``deletion_lag_s`` has passed since its offload.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from bkframe.client.logs.model import LogSettings, Segment


@attrs.frozen
class OffloadPolicy:
    """What the service does with one log."""

    #: The tier its segments go to; None: they are not offloaded.
    tier: str | None
    after_s: float | None
    beyond_bytes: int | None
    deletion_lag_s: float

    @classmethod
    def of(
        cls, settings: LogSettings, *, tier: str = "", after_s: float = 0.0, beyond_bytes: int = 0,
        deletion_lag_s: float = 4 * 3600.0,
    ) -> OffloadPolicy:
        """The log's ``settings`` over the service's defaults (``""`` and 0: none)."""
        return cls(
            settings.offload_tier if settings.offload_tier is not None else (tier or None),
            settings.offload_after_s if settings.offload_after_s is not None else (after_s or None),
            settings.offload_beyond_bytes if settings.offload_beyond_bytes is not None else (beyond_bytes or None),
            settings.offload_deletion_lag_s if settings.offload_deletion_lag_s is not None else deletion_lag_s,
        )

    @property
    def offloads(self) -> bool:
        return self.tier is not None and (self.after_s is not None or self.beyond_bytes is not None)

    def due(self, segments: Sequence[Segment], now: float) -> dict[int, float | None]:
        """The segments to offload now, by number, oldest first, each with since when it is
        due (s since the epoch) when its age makes it so, else None (due by size)."""
        if not self.offloads:
            return {}
        candidates = [s for s in segments if s.closed and s.entries > 0 and s.offload is None]
        out: dict[int, float | None] = {}
        if self.after_s is not None:
            for seg in candidates:
                since = seg.aged_at() + self.after_s
                if since <= now:
                    out[seg.number] = since
        if self.beyond_bytes is not None:
            left = sum(s.length for s in candidates)
            for seg in candidates:
                if left <= self.beyond_bytes:
                    break
                out.setdefault(seg.number, None)
                left -= seg.length
        return dict(sorted(out.items()))

    def deletable(self, segments: Sequence[Segment], now: float) -> list[Segment]:
        """The offloaded segments whose ledgers are past the deletion lag and still on the bookies."""
        return [
            s for s in segments
            if s.offload is not None and s.offload.on_bookies and s.offload.offloaded_at + self.deletion_lag_s <= now
        ]
