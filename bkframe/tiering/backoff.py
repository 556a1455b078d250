"""Backing off a failing tier: the offload service leaves a tier that failed alone for a
while, doubling the wait while it keeps failing, and says so once per change of state.

A tier that fails (unreachable, refusing, timing out) is a state, not an event: the service
logs a WARNING when a tier starts failing and an INFO line when it works again -- not a line
per try -- while it keeps serving the logs of other tiers (and every log's deletions, which
need no tier).
"""

from __future__ import annotations

import logging

import attrs

log = logging.getLogger("bkframe.offload")


@attrs.define
class _Failing:
    since: float
    delay: float
    retry_at: float
    tries: int = 1


class TierBackoff:
    """Per tier URI: whether to try it now (:meth:`usable`), and what a try did."""

    def __init__(self, min_s: float, max_s: float) -> None:
        self.min_s = min_s
        self.max_s = max(max_s, min_s)
        self._failing: dict[str, _Failing] = {}

    def usable(self, tier: str, now: float) -> bool:
        state = self._failing.get(tier)
        return state is None or now >= state.retry_at

    def failing(self) -> list[str]:
        return sorted(self._failing)

    def failed(self, tier: str, error: BaseException, now: float) -> float:
        """A try of ``tier`` failed: the seconds until the next (logged when it starts failing)."""
        state = self._failing.get(tier)
        if state is None:
            state = self._failing[tier] = _Failing(now, self.min_s, now + self.min_s)
            log.warning("tier %s is failing (%s); backing off, from %g s up to %g s between tries",
                        tier, error, self.min_s, self.max_s)
        else:
            state.tries += 1
            state.delay = min(state.delay * 2, self.max_s)
            state.retry_at = now + state.delay
            log.debug("tier %s failed again (%s); next try in %g s", tier, error, state.delay)
        return state.delay

    def succeeded(self, tier: str, now: float) -> None:
        state = self._failing.pop(tier, None)
        if state is not None:
            log.info("tier %s works again (it failed for %.0f s, %d tries)", tier, now - state.since, state.tries)
