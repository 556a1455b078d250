"""Long polls (READ_LAC with LONG_POLL) waiting for a ledger's LAC to move.

Whatever moves a ledger's LAC (an add, an explicit LAC) or deletes the ledger wakes them;
each then looks at the ledger again and answers, or waits for the next move.
"""

from __future__ import annotations

import trio


class LacWaiters:
    def __init__(self) -> None:
        self._moved: dict[int, trio.Event] = {}

    def moved(self, ledger_id: int) -> None:
        """The ledger's LAC moved, or the ledger is gone: wake its long polls."""
        moved = self._moved.pop(ledger_id, None)
        if moved is not None:
            moved.set()

    async def wait(self, ledger_id: int) -> None:
        """Until the next :meth:`moved` of the ledger."""
        await self._moved.setdefault(ledger_id, trio.Event()).wait()
