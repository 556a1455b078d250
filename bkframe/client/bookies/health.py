"""Which bookies failed lately: quarantine, as BookKeeper's client keeps it.

A bookie that failed a request (an error, a timeout, a refused connection) is quarantined
for ``bookie_quarantine_s``: ensemble choices and replica orders put it last, so writers and
readers stop paying for it, but it is never excluded for good: when no healthy bookie is
left it is used again, and once the quarantine ends it is like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import anyio

log = logging.getLogger("bkframe.client")


class BookieHealth:
    def __init__(self, quarantine_s: float) -> None:
        self.quarantine_s = quarantine_s
        self._until: dict[str, float] = {}

    def failed(self, bookie_id: str, reason: str) -> None:
        """Quarantine ``bookie_id`` (again) from now."""
        if bookie_id not in self._until or not self.quarantined(bookie_id):
            log.info("quarantining bookie %s for %.0f s: %s", bookie_id, self.quarantine_s, reason)
        self._until[bookie_id] = anyio.current_time() + self.quarantine_s

    def quarantined(self, bookie_id: str) -> bool:
        until = self._until.get(bookie_id)
        if until is None:
            return False
        if anyio.current_time() >= until:
            del self._until[bookie_id]
            return False
        return True

    def healthy_first(self, bookies: Iterable[str]) -> list[str]:
        """``bookies`` in their order, quarantined ones moved to the end (stable)."""
        bookies = list(bookies)
        return [b for b in bookies if not self.quarantined(b)] + [b for b in bookies if self.quarantined(b)]
