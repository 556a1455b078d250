"""One logging setup for the bookie and the command line, from ``[logging] level, format``
(:class:`bkframe.core.config.LoggingConfig`).

``format = "text"`` writes ``TIME LEVEL LOGGER: message`` lines, ``"json"`` one JSON object
a line (``time``, ``level``, ``logger``, ``message``, and ``exception`` when there is one),
for log shippers. Secrets never reach a log line because no code logs them: tokens and
keys are kept out of every ``repr`` (see :class:`bkframe.client.settings.ClientSettings`)
and requests are logged by op and ids, never by content (docs/security.md).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TextIO

from bkframe.core.config import LoggingConfig

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object a line."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(config: LoggingConfig, *, level: int | None = None, stream: TextIO | None = None) -> None:
    """Configure the root logger once for the process (replacing earlier handlers):
    ``level`` (a :mod:`logging` level) overrides ``config.level`` (the CLI's ``-v``)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if config.format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if level is not None else getattr(logging, config.level.upper()))
