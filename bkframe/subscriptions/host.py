"""The owners of subscriptions a bookie hosts, reached by consumers over the bookie protocol
(docs/subscriptions.md, "Which process owns it"; the requests: docs/protocol.md).

A bookie with ``[subscriptions] enabled`` (and a metadata store) runs one
:class:`SubscriptionHost`. It keeps a map (log, subscription) -> owner: a SUB_* request for a
subscription it has no owner of takes it (the factory: by default
:meth:`Dispatcher.take <bkframe.subscriptions.dispatcher.Dispatcher.take>` with a client built
as the bookie's autorecovery builds its own), and an owner whose ``lost`` is set (fenced, or
its lock expired) is dropped, so the next request takes the subscription again or learns
who holds it now (NOT_OWNER with the holder).

Calls run in the host's own tasks, not the connection's: an owner's settle is never cut in the
middle because a connection closed. What a connection may make the bookie hold is bounded
(``[subscriptions]``): its calls under way, the consumers it leases for, the leases waiting for
records on the whole bookie (one more is served without waiting), a lease's wait, every call's
time. When a connection closes, its waiting leases are cancelled and, once its calls ended,
each consumer it leased for leaves -- unless that consumer leased through a newer connection
since (a consumer that reconnected keeps its leases).
"""

from __future__ import annotations

import enum
import hmac
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import anyio
import attrs
import trio

from bkframe.client.logs.positions import Position
from bkframe.common.answers_later import AnswersLater
from bkframe.core.config import SubscriptionsConfig
from bkframe.core.ledger_keys import password_hash
from bkframe.errors import NoSuchSubscriptionError, NotOwnerError, SubscriptionError, UnauthorizedError
from bkframe.proto.codes import MAX_FRAME_SIZE, Op, Status
from bkframe.proto.ops.subscription import (
    SubCommitRequest,
    SubLeaseRequest,
    SubLeaveRequest,
    SubRecord,
    SubRequest,
    SubSettleRequest,
    SubStatsRequest,
    encode_sub_commit_response,
    encode_sub_lease_response,
    encode_sub_leave_response,
    encode_sub_refusal,
    encode_sub_settle_response,
    encode_sub_stats_response,
)
from bkframe.subscriptions.in_bookie import InBookieAdds
from bkframe.subscriptions.owner import Delivery, Settle, SubscriptionOwner
from bkframe.subscriptions.settings import pack, unpack

log = logging.getLogger("bkframe.subscriptions.host")

#: Consumers one connection may lease for (a process runs a few; a hostile peer, millions).
MAX_CONSUMERS_PER_CONNECTION = 1024
#: A SUB_LEASE answer carries records of at most about this many bytes in all (the first
#: record whatever its size); the records leased beyond it are nacked at once, undelivered.
MAX_LEASE_ANSWER_BYTES = MAX_FRAME_SIZE // 4
#: Seconds an owner given up (the bookie stops, or it was lost) may take to close.
CLOSE_TIMEOUT_S = 5.0
#: Seconds a consumer's leave (its connection closed) may take.
LEAVE_TIMEOUT_S = 10.0
#: Passwords whose hashes the host keeps (then it forgets them all and starts again).
MAX_HASHES_KEPT = 64

_OPS: dict[type[SubRequest], Op] = {
    SubLeaseRequest: Op.SUB_LEASE,
    SubSettleRequest: Op.SUB_SETTLE,
    SubLeaveRequest: Op.SUB_LEAVE,
    SubStatsRequest: Op.SUB_STATS,
    SubCommitRequest: Op.SUB_COMMIT,
}


class HostedOwner(SubscriptionOwner, Protocol):
    """An owner the host holds: the consumer's calls, and when it ended."""

    @property
    def lost(self) -> anyio.Event:
        """Set once it was fenced or lost its lock: the host drops it."""
        ...

    async def aclose(self) -> None:
        """Give the subscription up."""
        ...


#: ``factory(log, subscription, password)``: take the subscription with the log's password
#: (raises NotOwnerError naming the holder when another process owns it,
#: NoSuchSubscriptionError when there is none, UnauthorizedError for a wrong password).
OwnerFactory = Callable[[str, str, bytes], Awaitable[HostedOwner]]


class _Refused(Exception):
    """A call answered with a refusal rather than by an owner."""

    def __init__(self, status: Status, message: str, holder: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.holder = holder


def _refused_for(error: BaseException) -> _Refused:
    """What a consumer is told of an owner's (or a take's) failure."""
    if isinstance(error, _Refused):
        return error
    if isinstance(error, NotOwnerError):
        return _Refused(Status.NOT_OWNER, str(error), error.holder or "")
    if isinstance(error, NoSuchSubscriptionError):
        return _Refused(Status.NO_SUBSCRIPTION, str(error))
    if isinstance(error, UnauthorizedError):
        return _Refused(Status.UNAUTHORIZED, str(error))
    if isinstance(error, (SubscriptionError, ValueError)):
        return _Refused(Status.BAD_REQUEST, str(error))
    return _Refused(Status.IO_ERROR, f"the subscription's owner failed: {error!r}; ask again")


@attrs.define(eq=False)
class _Taking:
    """A take of one subscription under way, which every call for it waits for."""

    done: trio.Event = attrs.Factory(trio.Event)
    refused: _Refused | None = None


@attrs.define(eq=False)
class SubscriptionHost:
    """Hosts subscription owners on a bookie: ``await nursery.start(host.run)``, and the
    bookie serves SUB_* requests through :meth:`connection`.

    ``client_factory(task_group)`` makes the client the default owner factory takes
    subscriptions with (its tasks in ``task_group``); ``factory`` replaces the default (tests)."""

    config: SubscriptionsConfig
    #: Whom the owners' locks name: the bookie's id (consumers find the bookie by it).
    holder: str
    client_factory: Callable[[anyio.abc.TaskGroup], Any] | None = attrs.field(default=None, kw_only=True)
    factory: OwnerFactory | None = attrs.field(default=None, kw_only=True)
    #: The hosting bookie taking the owners' state-ledger appends without a socket
    #: (:mod:`bkframe.subscriptions.in_bookie`); None: they go by the socket.
    in_bookie: InBookieAdds | None = attrs.field(default=None, kw_only=True)
    #: The owners held, by (log, subscription).
    owners: dict[tuple[str, str], HostedOwner] = attrs.field(factory=dict, init=False)
    #: Calls under way and leases waiting for records, on the whole bookie.
    calls: int = attrs.field(default=0, init=False)
    waiting_leases: int = attrs.field(default=0, init=False)
    _taking: dict[tuple[str, str], _Taking] = attrs.field(factory=dict, init=False)
    #: The connection each consumer last leased through (only it makes the consumer leave).
    _leased_through: dict[tuple[str, str, str], _Connection] = attrs.field(factory=dict, init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    _take: OwnerFactory | None = attrs.field(default=None, init=False)
    #: Passwords' hashes computed lately (every call checks one: two SHA-256 each otherwise).
    _hashes: dict[bytes, str] = attrs.field(factory=dict, init=False)

    @property
    def running(self) -> bool:
        return self._nursery is not None

    def connection(self) -> _Connection:
        return _Connection(self)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host owners until cancelled; they are given up on the way out."""
        async with anyio.create_task_group() as client_tasks:
            take = self.factory
            if take is None:
                if self.client_factory is None:
                    raise ValueError("SubscriptionHost needs a factory or a client_factory")
                client = self.client_factory(client_tasks)
                if self.in_bookie is not None:
                    await client_tasks.start(self.in_bookie.run)
                    client.pool.in_process[self.holder] = self.in_bookie
                take = dispatcher_factory(client, client_tasks, self.holder, self.config.owner_ttl_s)
            try:
                async with trio.open_nursery() as nursery:
                    self._take, self._nursery = take, nursery
                    log.info("hosting subscription owners as %s", self.holder)
                    task_status.started()
                    await trio.sleep_forever()
            finally:
                self._nursery = self._take = None
                if self.in_bookie is not None:
                    # Stopping: the bookie's server has stopped serving, and so do its own adds
                    # (the owners' last appends go by the socket, as every client's do).
                    self.in_bookie.close()
                owners, self.owners = list(self.owners.values()), {}
                self._taking.clear()
                with trio.CancelScope(shield=True):
                    async with trio.open_nursery() as closing:
                        for owner in owners:
                            closing.start_soon(_close, owner)
                client_tasks.cancel_scope.cancel()

    # -- owners ----------------------------------------------------------------------------

    async def owner(self, log_name: str, name: str, password: bytes = b"") -> HostedOwner:
        """The owner of ``log_name``/``name`` here, taken if need be (with the log's
        ``password``), for a caller who knows that password; raises :class:`_Refused`."""
        key = (log_name, name)
        while True:
            owner = self.owners.get(key)
            if owner is not None:
                if not owner.lost.is_set():
                    # The owner reads the log with its password: a caller must know it too.
                    if not hmac.compare_digest(self._hash(password), self._hash(getattr(owner, "password", b""))):
                        raise _Refused(Status.UNAUTHORIZED, f"wrong password for log {log_name!r}")
                    return owner
                self._drop(key, owner)
                continue
            taking = self._taking.get(key)
            if taking is None:
                if self._nursery is None:
                    raise _Refused(Status.NOT_OWNER, "this bookie's subscription host is not running (starting or stopping)")
                if len(self.owners) + len(self._taking) >= self.config.max_owners:
                    raise _Refused(
                        Status.NOT_OWNER,
                        f"bookie {self.holder} owns {self.config.max_owners} subscriptions already "
                        "([subscriptions] max_owners); ask another bookie",
                    )
                taking = self._taking[key] = _Taking()
                # In the host's tasks, not the caller's: a caller that gives up (its connection
                # closed) does not cut a take in the middle, and every caller waits for one take.
                self._nursery.start_soon(self._take_over, key, taking, password)
            await taking.done.wait()
            if taking.refused is not None:
                raise taking.refused

    def _hash(self, password: bytes) -> str:
        hashed = self._hashes.get(password)
        if hashed is None:
            if len(self._hashes) >= MAX_HASHES_KEPT:
                self._hashes.clear()
            hashed = self._hashes[bytes(password)] = password_hash(password)
        return hashed

    async def _take_over(self, key: tuple[str, str], taking: _Taking, password: bytes) -> None:
        try:
            assert self._take is not None
            owner = await self._take(*key, password)
        except Exception as e:  # noqa: BLE001 - told to every caller waiting for the take
            taking.refused = _refused_for(e)
            if taking.refused.status == Status.IO_ERROR:
                log.warning("could not take subscription %s of log %s: %r", key[1], key[0], e)
        else:
            self.owners[key] = owner
            if self._nursery is not None:
                self._nursery.start_soon(self._watch, key, owner)
            log.info("owner of subscription %s of log %s", key[1], key[0])
        finally:
            if self._taking.get(key) is taking:
                del self._taking[key]
            taking.done.set()

    async def _watch(self, key: tuple[str, str], owner: HostedOwner) -> None:
        await owner.lost.wait()
        log.info("lost the subscription %s of log %s (fenced, or its lock expired)", key[1], key[0])
        self._drop(key, owner)

    def _drop(self, key: tuple[str, str], owner: HostedOwner) -> None:
        if self.owners.get(key) is owner:
            del self.owners[key]
            if self._nursery is not None:
                self._nursery.start_soon(_close, owner)

    # -- calls -----------------------------------------------------------------------------

    async def serve(self, req: SubRequest) -> bytes:
        """The answer to ``req`` (never raises but for cancellation)."""
        cfg = self.config
        try:
            if isinstance(req, SubLeaseRequest):
                wait_s = min(req.wait_ms / 1000, cfg.max_lease_wait_s)
                if wait_s > 0 and self.waiting_leases >= cfg.max_waiting_leases:
                    wait_s = 0.0  # as a long poll beyond its cap: served at once
                waits = wait_s > 0
                self.waiting_leases += waits
                try:
                    with trio.fail_after(wait_s + cfg.call_timeout_s):
                        owner = await self.owner(req.log, req.subscription, req.password)
                        return await self._lease(owner, req, wait_s)
                finally:
                    self.waiting_leases -= waits
            with trio.fail_after(cfg.call_timeout_s):
                owner = await self.owner(req.log, req.subscription, req.password)
                if isinstance(req, SubSettleRequest):
                    await owner.settle(req.consumer, _settle(req))
                    return encode_sub_settle_response(req.request_id)
                if isinstance(req, SubLeaveRequest):
                    await owner.leave(req.consumer)
                    return encode_sub_leave_response(req.request_id)
                if isinstance(req, SubCommitRequest):
                    results = await owner.commit(
                        req.consumer, [unpack(p) for p in req.positions], {o.log: o.ledgers for o in req.outputs},
                        password={o.log: o.password for o in req.outputs},
                    )
                    return encode_sub_commit_response(req.request_id, {n: r.segments for n, r in results.items()})
                assert isinstance(req, SubStatsRequest)
                return _stats(req, await owner.stats())
        except trio.TooSlowError:
            refused = _Refused(
                Status.IO_ERROR, f"the owner of subscription {req.subscription} did not answer in time "
                "([subscriptions] call_timeout_s); ask again",
            )
        except Exception as e:  # noqa: BLE001 - a consumer is told, the bookie goes on
            refused = _refused_for(e)
            if refused.status == Status.IO_ERROR:
                log.warning("%s of subscription %s of log %s failed: %r", type(req).__name__, req.subscription, req.log, e)
        return encode_sub_refusal(_OPS[type(req)], req.request_id, refused.status, refused.message, refused.holder)

    async def _lease(self, owner: HostedOwner, req: SubLeaseRequest, wait_s: float) -> bytes:
        lease_s = req.lease_ms / 1000 if req.lease_ms else None
        got = await owner.lease(req.consumer, req.max_records, wait_s, lease_s)
        records: list[SubRecord] = []
        size = 0
        for i, d in enumerate(got):
            size += len(d.payload) + len(d.key or b"") + sum(len(k) + len(v) for k, v in d.properties.items())
            if i and size > MAX_LEASE_ANSWER_BYTES:
                # Too much for one answer: the rest go back at once, undelivered (their
                # delivery count is one more; the consumer asks for fewer next time).
                await owner.settle(req.consumer, Settle(nacks=[(x.position, 0.0) for x in got[i:]]))
                break
            records.append(_record(d))
        return b"".join(encode_sub_lease_response(req.request_id, records))

    async def leave_later(self, log_name: str, name: str, consumer: str) -> None:
        """A consumer's connection closed: it leaves (if its owner is still here)."""
        owner = self.owners.get((log_name, name))
        if owner is None or owner.lost.is_set():
            return
        try:
            with trio.fail_after(LEAVE_TIMEOUT_S):
                await owner.leave(consumer)
        except Exception as e:  # noqa: BLE001 - its leases then end at their deadline
            log.info("consumer %s of subscription %s did not leave (%r); its leases end at their deadline", consumer, name, e)


class _Later(enum.Enum):
    """:meth:`_Connection._settle_now`: the settle goes the way of every call."""

    LATER = 0


@attrs.define(eq=False)
class _Connection(AnswersLater):
    """One connection's SUB_* calls (:class:`bkframe.bookie.subscription_calls.ConnectionCalls`)."""

    host: SubscriptionHost
    #: Calls under way (their answers not ready yet).
    pending: int = 0
    #: The consumers it leased for: (log, subscription, consumer).
    consumers: set[tuple[str, str, str]] = attrs.Factory(set)
    #: Its leases' cancel scopes: a closed connection's waiting leases end at once.
    _leases: set[trio.CancelScope] = attrs.Factory(set)

    def call(self, req: SubRequest) -> bytes | None:
        host = self.host
        op = _OPS[type(req)]
        if host._nursery is None:
            return encode_sub_refusal(op, req.request_id, Status.NOT_OWNER, "this bookie's subscription host is not running")
        if self.pending >= host.config.max_calls_per_connection:
            why = f"{self.pending} subscription calls under way on this connection ([subscriptions] max_calls_per_connection)"
            return encode_sub_refusal(op, req.request_id, Status.TOO_MANY_REQUESTS, why)
        if isinstance(req, (SubLeaseRequest, SubLeaveRequest)):
            key = (req.log, req.subscription, req.consumer)
            if isinstance(req, SubLeaseRequest):
                if key not in self.consumers and len(self.consumers) >= MAX_CONSUMERS_PER_CONNECTION:
                    why = f"this connection leases for {MAX_CONSUMERS_PER_CONNECTION} consumers already"
                    return encode_sub_refusal(op, req.request_id, Status.TOO_MANY_REQUESTS, why)
                # Before the lease is served: a lease cut by the connection's end still leaves.
                self.consumers.add(key)
                host._leased_through[key] = self
            else:
                self.consumers.discard(key)
                if host._leased_through.get(key) is self:
                    del host._leased_through[key]
        if type(req) is SubSettleRequest:
            settled = self._settle_now(req)
            if settled is not _Later.LATER:
                return settled
        self.pending += 1
        host.calls += 1
        host._nursery.start_soon(self._serve, req)
        return None

    def _settle_now(self, req: SubSettleRequest) -> bytes | _Later | None:
        """A settle for an owner here, served without a task: applied now, answered by the
        owner's callback once its state-ledger entry is durable (a confirmed ack is one such
        call a record: its task, cancel scope and wake-ups were a good part of the bookie's
        CPU). Returns the answer now, None (answered later), or ``_Later.LATER`` when it must go
        the way of every call (no owner here yet, one without ``settle_nowait``)."""
        host = self.host
        owner = host.owners.get((req.log, req.subscription))
        settle_nowait = getattr(owner, "settle_nowait", None)
        if owner is None or settle_nowait is None or owner.lost.is_set():
            return _Later.LATER
        try:
            if not hmac.compare_digest(host._hash(req.password), host._hash(getattr(owner, "password", b""))):
                raise _Refused(Status.UNAUTHORIZED, f"wrong password for log {req.log!r}")
            durable = settle_nowait(req.consumer, _settle(req))
        except Exception as e:  # noqa: BLE001 - a consumer is told, the bookie goes on
            refused = _refused_for(e)
            if refused.status == Status.IO_ERROR:
                log.warning("a settle of subscription %s of log %s failed: %r", req.subscription, req.log, e)
            return encode_sub_refusal(Op.SUB_SETTLE, req.request_id, refused.status, refused.message, refused.holder)
        if durable is None:
            return encode_sub_settle_response(req.request_id)
        self.pending += 1
        host.calls += 1
        durable.callbacks.append(partial(self._settled, req))
        return None

    def _settled(self, req: SubSettleRequest, error: BaseException | None) -> None:
        """The owner's callback: a settle of :meth:`_settle_now` is durable (or failed)."""
        if error is None:
            answer = encode_sub_settle_response(req.request_id)
        else:
            answer = encode_sub_refusal(
                Op.SUB_SETTLE, req.request_id, Status.NOT_OWNER,
                f"subscription {req.subscription!r}: its owner here ended ({error}); ask again",
            )
        self._answered(answer)

    def _answered(self, answer: bytes) -> None:
        """A call's end: its answer goes (unless the connection closed)."""
        self.pending -= 1
        self.host.calls -= 1
        if answer and not self._closed:
            self._ready.append(answer)
        self._changed.set()
        if self._closed and not self.pending:
            self._leave()

    async def _serve(self, req: SubRequest) -> None:
        answer = b""
        try:
            if isinstance(req, SubLeaseRequest):
                with trio.CancelScope() as scope:
                    self._leases.add(scope)
                    if self._closed:
                        scope.cancel()
                    try:
                        answer = await self.host.serve(req)
                    finally:
                        self._leases.discard(scope)
            else:
                answer = await self.host.serve(req)
        finally:
            self._answered(answer)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ready.clear()
        for scope in self._leases:
            scope.cancel()
        self._changed.set()
        if not self.pending:
            self._leave()

    def _leave(self) -> None:
        """Every consumer that leased through this connection (and no newer one) leaves."""
        host = self.host
        consumers, self.consumers = self.consumers, set()
        for key in consumers:
            if host._leased_through.get(key) is self:
                del host._leased_through[key]
                if host._nursery is not None:
                    host._nursery.start_soon(host.leave_later, *key)


def dispatcher_factory(client: Any, task_group: anyio.abc.TaskGroup, holder: str, owner_ttl_s: float) -> OwnerFactory:
    """The default: the subscription's :class:`~bkframe.subscriptions.dispatcher.Dispatcher`,
    taken with ``client`` under the lock ``subscription/<log>/<name>`` held by ``holder``."""

    async def take(log_name: str, name: str, password: bytes) -> HostedOwner:
        # Imported when first needed: the dispatcher is the heavy part, and a bookie that
        # never hosts an owner never loads it.
        from bkframe.subscriptions.dispatcher import Dispatcher

        owner: HostedOwner = await Dispatcher.take(
            client, log_name, name, holder=holder, task_group=task_group, owner_ttl_s=owner_ttl_s, password=password
        )
        return owner

    return take


def in_bookie_client(store: Any, plugins: Any, settings: Any) -> Callable[[anyio.abc.TaskGroup], Any]:
    """The client the host's owners use, made as the bookie's autorecovery makes its own
    (``settings``: :meth:`ClientSettings.for_bookie <bkframe.client.settings.ClientSettings.for_bookie>`)."""

    def make(task_group: anyio.abc.TaskGroup) -> Any:
        from bkframe.client.client import Client
        from bkframe.client.context import ClientContext

        return Client(ClientContext.create(task_group, store, plugins, settings))

    return make


async def _close(owner: HostedOwner) -> None:
    with trio.move_on_after(CLOSE_TIMEOUT_S):
        try:
            await owner.aclose()
        except Exception as e:  # noqa: BLE001 - its lock expires by itself
            log.info("closing a subscription owner failed: %r", e)


def _record(d: Delivery) -> SubRecord:
    return SubRecord(pack(d.position), d.delivery_count, d.deadline_ms, d.payload, d.key, d.timestamp, dict(d.properties))


def _settle(req: SubSettleRequest) -> Settle:
    return Settle(
        acks=tuple(unpack(p) for p in req.acks),
        ack_ranges=tuple((unpack(a), unpack(b)) for a, b in req.ack_ranges),
        nacks=tuple((unpack(p), ms / 1000) for p, ms in req.nacks),
        extends=tuple(unpack(p) for p in req.extends),
        lease_s=req.lease_ms / 1000 if req.lease_ms else None,
    )


def _stats(req: SubStatsRequest, s: Any) -> bytes:
    return encode_sub_stats_response(
        req.request_id, backlog=s.backlog, in_flight=s.in_flight, waiting=s.waiting, delayed=s.delayed,
        delivered=s.delivered, redelivered=s.redelivered, acked=s.acked, dead_lettered=s.dead_lettered,
        mark_delete=pack(Position(*s.mark_delete)), consumers=s.consumers, epoch=s.epoch, owner=s.owner,
    )

