"""Long polls (READ_LAC with LONG_POLL) waiting for a ledger's LAC to move.

A waiting poll is a small record, not a task: it sits in its ledger's heap (by the LAC it
waits to see passed) and in its connection's heap (by deadline). Whatever moves a ledger's
LAC (an add, an explicit LAC) or deletes the ledger calls :meth:`LacWaiters.moved`, which
answers exactly the polls the move satisfies. Each connection's :class:`ConnectionPolls`
answers its polls whose time is up, and all of them at once when the connection ends, so no
poll outlives its connection.

Limits (``[limits]``): a connection may have ``max_long_polls_per_connection`` waiting and
the bookie ``max_long_polls``; a poll beyond either, like one whose time is up, is answered
with the LAC the bookie has (status OK): to a client that is a poll that timed out, and it
asks again. A poll waits at most ``max_long_poll_timeout_s``, whatever it asked for.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Awaitable, Callable

import attrs
import trio

from bkframe.common.answers_later import AnswersLater
from bkframe.core.counters import Counters
from bkframe.core.interfaces.ledger_storage import LedgerState, LedgerStorage
from bkframe.proto.codes import Status
from bkframe.proto.ops.read_lac import ReadLacRequest, encode_read_lac_response

#: Breaks ties in the heaps (polls themselves do not compare).
_sequence = itertools.count()


@attrs.define(eq=False)
class _Poll:
    request: ReadLacRequest
    connection: ConnectionPolls
    done: bool = False


@attrs.define(eq=False)
class _LedgerPolls:
    #: (previous LAC, sequence, poll): the polls a move of the LAC satisfies come first.
    heap: list[tuple[int, int, _Poll]] = attrs.Factory(list)
    #: Entries of polls answered otherwise (timed out, connection ended), still in the heap.
    dead: int = 0


class LacWaiters:
    """The long polls waiting on one bookie."""

    def __init__(self, storage: LedgerStorage, counters: Counters) -> None:
        self.storage = storage
        self.counters = counters
        self._by_ledger: dict[int, _LedgerPolls] = {}

    def connection(self, *, max_waiting: int, max_total: int, max_timeout_s: float) -> ConnectionPolls:
        """The long polls of a new connection, with its limits."""
        return ConnectionPolls(self, max_waiting=max_waiting, max_total=max_total, max_timeout_s=max_timeout_s)

    def answer(self, req: ReadLacRequest) -> bytes:
        """The answer to ``req`` now: the ledger's LAC (NO_LEDGER once it is deleted)."""
        state = self.storage.ledger_state(req.ledger_id)
        return self._answer(req, state)

    def _answer(self, req: ReadLacRequest, state: LedgerState | None) -> bytes:
        if state is None:
            return encode_read_lac_response(req.request_id, Status.NO_LEDGER, req.ledger_id, -1, -1, "ledger deleted")
        last = self.storage.last_entry_id(req.ledger_id)
        return encode_read_lac_response(req.request_id, Status.OK, req.ledger_id, state.lac, last)

    def moved(self, ledger_id: int) -> None:
        """The ledger's LAC moved, or the ledger is gone: answer the polls that waited for it."""
        polls = self._by_ledger.get(ledger_id)
        if polls is None:
            return
        state = self.storage.ledger_state(ledger_id)
        heap = polls.heap
        while heap and (state is None or heap[0][0] < state.lac):
            poll = heapq.heappop(heap)[2]
            if poll.done:
                polls.dead -= 1
                continue
            poll.done = True
            self.counters.long_polls_waiting -= 1
            poll.connection.answered(self._answer(poll.request, state))
        if not heap:
            del self._by_ledger[ledger_id]

    def _add(self, poll: _Poll) -> None:
        req = poll.request
        assert req.previous_lac is not None
        polls = self._by_ledger.get(req.ledger_id)
        if polls is None:
            polls = self._by_ledger[req.ledger_id] = _LedgerPolls()
        heapq.heappush(polls.heap, (req.previous_lac, next(_sequence), poll))
        self.counters.long_polls_waiting += 1

    def _drop(self, poll: _Poll) -> None:
        """``poll`` is answered otherwise: out of its ledger's heap (at once, or by the next
        compaction of a heap that is half dead)."""
        poll.done = True
        self.counters.long_polls_waiting -= 1
        ledger_id = poll.request.ledger_id
        polls = self._by_ledger[ledger_id]
        polls.dead += 1
        if polls.dead * 2 >= len(polls.heap):
            live = [entry for entry in polls.heap if not entry[2].done]
            if live:
                heapq.heapify(live)
                self._by_ledger[ledger_id] = _LedgerPolls(live)
            else:
                del self._by_ledger[ledger_id]


class ConnectionPolls(AnswersLater):
    """One connection's waiting long polls, and the answers ready to send.

    The server registers each long poll with :meth:`wait` and runs :meth:`run` as one task
    of the connection; :meth:`close` answers what still waits when the connection's reader
    ends (the client left, or the bookie stops), and :meth:`run` returns once they are sent.
    """

    def __init__(self, waiters: LacWaiters, *, max_waiting: int, max_total: int, max_timeout_s: float) -> None:
        super().__init__()
        self.waiters = waiters
        self.max_waiting = max_waiting
        self.max_total = max_total
        self.max_timeout_s = max_timeout_s
        #: Polls waiting now.
        self.waiting = 0
        self._deadlines: list[tuple[float, int, _Poll]] = []

    def wait(self, req: ReadLacRequest) -> bytes | None:
        """Let ``req`` wait for its ledger's LAC to pass ``req.previous_lac`` (None), or its
        answer now: the LAC passed it already (a later request of its frame moved it), or a
        cap is met."""
        waiters = self.waiters
        counters = waiters.counters
        assert req.previous_lac is not None
        state = waiters.storage.ledger_state(req.ledger_id)
        if state is None or state.lac > req.previous_lac:
            return waiters._answer(req, state)
        if self._closed or self.waiting >= self.max_waiting or counters.long_polls_waiting >= self.max_total:
            counters.long_polls_refused += 1
            return waiters.answer(req)
        poll = _Poll(req, self)
        deadline = trio.current_time() + min(req.timeout_ms / 1000, self.max_timeout_s)
        if not self._deadlines or deadline < self._deadlines[0][0]:
            self._changed.set()  # the wait in run() ends sooner
        heapq.heappush(self._deadlines, (deadline, next(_sequence), poll))
        waiters._add(poll)
        self.waiting += 1
        return None

    def answered(self, answer: bytes) -> None:
        """A poll of this connection is answered (its LAC moved): send ``answer``."""
        self.waiting -= 1
        self._ready.append(answer)
        self._changed.set()
        if len(self._deadlines) > 64 and self.waiting * 2 < len(self._deadlines):
            # The deadlines of polls answered by moves are dead weight: drop them.
            self._deadlines = [entry for entry in self._deadlines if not entry[2].done]
            heapq.heapify(self._deadlines)

    def _answer_now(self, poll: _Poll) -> None:
        self.waiters._drop(poll)
        self.waiting -= 1
        self._ready.append(self.waiters.answer(poll.request))

    def _expire(self, now: float) -> None:
        deadlines = self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][2].done):
            poll = heapq.heappop(deadlines)[2]
            if not poll.done:
                self._answer_now(poll)

    def close(self) -> None:
        """The connection's reader ended: answer every poll still waiting now."""
        if self._closed:
            return
        self._closed = True
        for entry in self._deadlines:
            if not entry[2].done:
                self._answer_now(entry[2])
        self._deadlines = []
        self._changed.set()

    async def run(self, send: Callable[[list[bytes]], Awaitable[None]]) -> None:
        """Send the answers as they come (``send``), answer polls whose time is up, and
        return once the connection is closed and everything is sent."""
        try:
            await super().run(send)
        finally:
            # Cancelled (the connection failed): nothing may stay registered.
            self.close()

    async def _wait(self) -> None:
        deadline = self._deadlines[0][0] if self._deadlines else math.inf
        with trio.move_on_at(deadline):
            await self._changed.wait()
        self._expire(trio.current_time())
