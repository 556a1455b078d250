"""A warning that a flood cannot turn into a flood of log lines.

A bookie refusing connections (a cap met) or authentications logs why, but a client that
opens thousands of connections a second must not make it write thousands of lines: a
:class:`ThrottledWarning` logs at most one line per interval and says how many it stood for.
"""

from __future__ import annotations

import logging
import time

#: Seconds between two lines of one throttled warning.
INTERVAL_S = 10.0


class ThrottledWarning:
    def __init__(self, logger: logging.Logger, interval_s: float = INTERVAL_S) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._last = -interval_s
        self._suppressed = 0

    def warn(self, message: str, *args: object) -> None:
        """Log ``message % args`` unless a line was logged less than ``interval_s`` ago."""
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self._suppressed += 1
            return
        if self._suppressed:
            message += " (and %d more like it in the last %.0f s)"
            args = (*args, self._suppressed, now - self._last)
        self._last = now
        self._suppressed = 0
        self.logger.warning(message, *args)
