"""What a bookie sends back for one request frame, and what must happen before it may."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs

from bkframe.bookie.access import ANONYMOUS, Access
from bkframe.core.counters import Histogram
from bkframe.core.interfaces import Buffer
from bkframe.proto.base import BadMessage
from bkframe.proto.ops.read_lac import ReadLacRequest
from bkframe.proto.ops.subscription import SubRequest
from bkframe.proto.table import Request


@attrs.define
class ResponseBatch:
    """Responses to one request frame, to be sent once the journal is durable to ``wait_seq``."""

    parts: list[Buffer] = attrs.Factory(list)
    wait_seq: int = 0
    #: Responses that must wait for something (a sync, a key check): the server runs each
    #: as a task and sends what it returns.
    deferred: list[Callable[[], Awaitable[bytes]]] = attrs.Factory(list)
    #: Long polls to register with the connection (:mod:`bkframe.bookie.lac_waiters`): they wait as records,
    #: not tasks, and end with their connection.
    long_polls: list[ReadLacRequest] = attrs.Factory(list)
    #: SUB_* requests to hand to the connection's subscription calls
    #: (:mod:`bkframe.bookie.subscription_calls`): they are answered by the owner, later.
    subscription_calls: list[SubRequest] = attrs.Factory(list)
    #: Called once its answers are sent (or the connection is gone): the server gives back
    #: the in-flight memory they held (see :mod:`bkframe.bookie.serving.inflight_memory`).
    on_answered: Callable[[], None] | None = None
    #: The frame's requests, to answer them again if the journal loses ``wait_seq``.
    requests: Sequence[Request | BadMessage] = ()
    #: Large entries were written once: the ack also waits for ledger storage's
    #: ``sync_entries`` (see :class:`WriteOnceStorage`).
    sync_storage: bool = False
    #: When the frame was read (trio clock), and the latency histograms its answer ends:
    #: one per kind (add, read) and ledger type in the frame, observed once when it is sent.
    received: float = 0.0
    timed: list[Histogram] = attrs.Factory(list)
    #: What the frame's connection may do beyond what a ledger's key allows (see :mod:`bkframe.bookie.access`).
    access: Access = ANONYMOUS

    @property
    def waits(self) -> bool:
        """Its answers may leave only once something is durable (see
        :meth:`RequestHandler.durable_answers <bkframe.bookie.requests.RequestHandler.durable_answers>`)."""
        return bool(self.wait_seq) or self.sync_storage
