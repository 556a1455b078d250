"""Records: what every worker process saw, one JSON object per line, outside the cluster.

A worker appends a line with one ``os.write`` on an ``O_APPEND`` descriptor right after
the call it reports returned, so the line survives a kill -9 of the worker a moment later
(the page cache keeps it; only bookies lose power in this suite, never the harness's
disk). A torn last line (a write cut by the kill) is skipped when reading.

Events (``ev``) and their fields:

``created`` ledger type e w a ensemble   a writer created a ledger
``ack`` ledger entry hash                an append returned (PD, BYPASS: confirmed; VD: acknowledged)
``synced`` ledger upto                   VD ``sync()`` returned ``upto``: entries <= upto are synced
``closing`` ledger                       the writer called ``close()``
``closed`` ledger last by                a close or recovery returned the closed end ``last``
``writer-failed`` ledger error           the handle failed (fenced, bookie lost, ...)
``append-after-failure`` ledger ok error the writer tried once more on the failed handle
``recovered`` ledger last was_open       a recovery (open with recovery) returned
``read`` ledger first last               a reader read these entries and they were right
``read-mismatch`` ledger entry hash expected   a reader got wrong bytes
``read-absent`` ledger entry lac error   every replica said an entry <= LAC does not exist
``read-error`` ledger error              a read failed (a bookie down; informational)
``lac-seen`` ledger lac                  a reader saw this LAC
``hung`` what seconds                    a client call passed its deadline (then the worker exits)
``gave-up`` ledger error                 a recovery kept failing until its deadline
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class RecordFile:
    """Append-only; each :meth:`write` is one ``os.write`` of one line."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"t": round(time.time(), 4), "src": self.source, "ev": ev, **fields}, separators=(",", ":"))
        os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def read_records(directory: Path) -> Iterator[dict[str, Any]]:
    """Every complete record of every ``*.jsonl`` file under ``directory``."""
    for path in sorted(directory.glob("*.jsonl")):
        yield from read_record_file(path)


def read_record_file(path: Path) -> Iterator[dict[str, Any]]:
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for raw in f:
            if not raw.endswith(b"\n"):
                continue  # torn by a kill in the middle of the write
            try:
                yield json.loads(raw)
            except json.JSONDecodeError:
                continue
