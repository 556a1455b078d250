"""The state-ledger appends of the owners a bookie hosts, into that bookie without a socket
(docs/subscriptions.md, "Which process owns it").

A bookie-hosted owner's state ledger normally has the hosting bookie in its ensemble (always
with three bookies and E=3), so one of the three replicas of every append went
from the owner's client through the loopback socket into the same process: a frame encoded,
sent, received, decoded, answered and the answer decoded again, with a wake-up of three tasks
on the way. :class:`InBookieAdds` hands the add to the bookie's request handler directly,
the very call that serves a connection's ADD_BATCH: the same checks (master key, fencing,
a closed or deleted ledger, read-only), the same journal record, and the same answer, sent
only once :meth:`durable_answers` says it may be (PD: the journal's fsync). So the ledger's
semantics are those of any replica: a fenced ledger refuses the add here as on the wire,
the LAC the writer sends with the add is stored with it, and an answer acknowledges nothing
that is not durable.

It takes adds only while the bookie serves (:attr:`taking_adds`); before and once its host
stops, the writer's adds go by the socket as before. The subscriptions package never
imports the bookie: whoever composes the bookie (``bkframe.cli.bookie``) hands over its
request handler and the :class:`~bkframe.bookie.access.Access` to serve with.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from typing import Any, Protocol

import attrs
import trio

from bkframe.client.bookies.errors import BookieConnectionError, BookieTimeoutError
from bkframe.client.bookies.pending_response import PendingResponse
from bkframe.core.interfaces import Buffer
from bkframe.errors import ProtocolError
from bkframe.proto.ops.add_batch import AddBatchRequest, AddBatchResponse
from bkframe.proto.table import decode_responses

log = logging.getLogger("bkframe.subscriptions")


class BookieRequests(Protocol):
    """What of a bookie's request handler (``bkframe.bookie.requests.RequestHandler``) is used."""

    def handle(self, requests: Sequence[Any], access: Any) -> Any: ...

    async def durable_answers(self, batches: Sequence[Any]) -> list[Buffer]: ...

    def answered(self, batches: Sequence[Any]) -> None: ...


@attrs.define(eq=False)
class _Add:
    request_id: int
    batch: Any
    pending: PendingResponse[AddBatchResponse]
    deadline: float


@attrs.define(eq=False)
class InBookieAdds:
    """A bookie's adds for the clients of its own subscription owners
    (:class:`~bkframe.client.bookies.pool.InProcessBookie`): ``await nursery.start(adds.run)``,
    then register it in the client's pool under the bookie's id."""

    requests: BookieRequests
    #: The access the adds are served with (a connection's, as after its AUTH).
    access: Any
    #: Set once the bookie serves (the server's own requests wait for it too).
    ready: trio.Event
    #: Adds served in this process (for tests and the curious).
    served: int = 0
    _open: bool = attrs.field(default=False, init=False)
    _waiting: list[_Add] = attrs.field(factory=list, init=False)
    _answering: list[_Add] = attrs.field(factory=list, init=False)
    _wake: trio.Event = attrs.field(factory=trio.Event, init=False)
    _ids: Any = attrs.field(factory=lambda: itertools.count(1), init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)

    @property
    def taking_adds(self) -> bool:
        return self._open and self.ready.is_set()

    def close(self) -> None:
        """Take no more adds (those served are still answered while :meth:`run` runs)."""
        self._open = False

    def submit_add_batch(
        self, ledger_id: int, entry_ids: list[int], entries: list[Buffer], *, master_key: bytes, lac: int = -1,
        ledger_type: int = 0, recovery: bool = False, timeout_s: float | None = None,
    ) -> PendingResponse[AddBatchResponse]:
        """Serve the add now, as a connection's ADD_BATCH is served (stored and journaled
        before this returns: ordered with every add served before and after it); its answer
        comes once the bookie may send it (durable), never in this call."""
        rid = next(self._ids)
        request = AddBatchRequest(
            rid, ledger_id, lac, ledger_type, bytes(master_key), list(entry_ids), [memoryview(e) for e in entries], recovery,
        )
        batch = self.requests.handle([request], self.access)
        self.served += 1
        now = trio.current_time()
        pending: PendingResponse[AddBatchResponse] = PendingResponse(AddBatchResponse, submitted=now)
        deadline = math.inf if timeout_s is None else now + timeout_s
        add = _Add(rid, batch, pending, deadline)
        if batch.deferred and self._nursery is not None:
            # A ledger's first add here waits for the metadata store's word on its key: on
            # its own, the others' answers do not wait for it.
            self._nursery.start_soon(self._answer_deferred, add)
        else:
            self._waiting.append(add)
            self._wake.set()
        return pending

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Answer the adds served as they become durable (one wait for all that are served
        meanwhile, as a connection's writer does), until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._open = True
                task_status.started()
                while True:
                    if not self._waiting:
                        self._wake = trio.Event()
                        await self._wake.wait()
                    self._answering, self._waiting = self._waiting, []
                    await self._answer(self._answering)
        finally:
            self._open = False
            self._nursery = None
            for add in (*self._answering, *self._waiting):  # (an add answered already keeps its answer)
                add.pending.complete(None, BookieConnectionError("the bookie's own adds stopped before this one was answered"))

    async def _answer(self, adds: list[_Add]) -> None:
        batches = [a.batch for a in adds]
        parts: list[Buffer] | None = None
        with trio.move_on_at(min(a.deadline for a in adds)):
            parts = await self.requests.durable_answers(batches)
        if parts is None:
            for add in adds:  # as a socket's request times out: the writer counts the bookie failed
                add.pending.complete(None, BookieTimeoutError("this bookie did not make its own add durable in time"))
            return
        self.requests.answered(batches)
        self._complete(adds, parts)

    async def _answer_deferred(self, add: _Add) -> None:
        try:
            with trio.move_on_at(add.deadline):
                parts = list(await self.requests.durable_answers([add.batch]))
                for deferred in add.batch.deferred:
                    parts.append(await deferred())
                self.requests.answered([add.batch])
                self._complete([add], parts)
                return
            add.pending.complete(None, BookieTimeoutError("this bookie did not answer its own add in time"))
        finally:  # (the first completion counts: this one only if stopped before any)
            add.pending.complete(None, BookieConnectionError("the bookie's own adds stopped before this one was answered"))

    @staticmethod
    def _complete(adds: list[_Add], parts: list[Buffer]) -> None:
        try:
            answers = {r.request_id: r for r in decode_responses(b"".join(parts))}
        except ProtocolError as e:  # a bug: the writer counts this bookie failed
            log.error("a bookie's answer to its own add does not parse: %s", e)
            answers = {}
        for add in adds:
            answer = answers.get(add.request_id)
            if answer is not None:
                add.pending.complete(answer)
            else:
                add.pending.complete(None, BookieConnectionError("this bookie gave no answer to its own add"))


__all__ = ["BookieRequests", "InBookieAdds"]
