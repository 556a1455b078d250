"""A subscription's owner as a consumer reaches it over the wire: on the bookie that hosts it
(:mod:`bkframe.subscriptions.host`; the requests: docs/protocol.md, "Subscriptions").

Finding the owner: the holder of the lock ``subscription/<log>/<name>`` is the bookie that
owns it (its id names the lock); when nobody holds it, the bookie that rendezvous hashing of
``<log>/<name>`` ranks first among the writable ones is asked, and takes it on that demand.
Every call goes through the client's connection to that bookie. NOT_OWNER is followed to the
holder it names (or, naming none, to the next bookie of the ranking); a lost connection, a
dead owner, a bookie that cannot answer now (IO_ERROR, TOO_MANY_REQUESTS) are tried again
after a back-off that doubles up to :data:`MAX_PAUSE_S`, until the call's ``failover_s`` is
spent. Every request has its own timeout: a lease its wait plus ``request_timeout_s``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import attrs

from bkframe.client.bookies.errors import BookieConnectionError, ClientClosedError
from bkframe.client.logs.envelope import NO_PROPERTIES
from bkframe.client.logs.model import CommitResult
from bkframe.client.logs.positions import Position
from bkframe.errors import NoSuchSubscriptionError, NotOwnerError, SubscriptionError, UnauthorizedError
from bkframe.proto import table
from bkframe.proto.codes import MAX_SUB_LEASE, MAX_SUB_SETTLE, Status
from bkframe.proto.ops.subscription import (
    SubOutput,
    SubReply,
    encode_sub_commit,
    encode_sub_lease,
    encode_sub_leave,
    encode_sub_settle,
    encode_sub_stats,
)
from bkframe.proto.table import Operation
from bkframe.subscriptions.owner import Delivery, Settle, SubscriptionStats
from bkframe.subscriptions.settings import pack, unpack

#: The first pause after a failed try; it doubles up to MAX_PAUSE_S.
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 1.0
#: NOT_OWNER answers followed at once, one after the other, before the next one waits for
#: the back-off (two bookies that each name the other must not spin).
MAX_REDIRECTS = 3
_U32 = (1 << 32) - 1

P = TypeVar("P", bound=SubReply)


def lock_name(log: str, name: str) -> str:
    """The owner's lock (as the dispatcher takes it: docs/subscriptions.md)."""
    return f"subscription/{log}/{name}"


def rendezvous(log: str, name: str, bookie_ids: Iterable[str]) -> list[str]:
    """``bookie_ids`` ranked for the subscription, first the one to ask: highest random weight,
    so a bookie joining or leaving moves only the subscriptions it ranks first for."""
    key = f"{log}/{name}".encode()

    def weight(bookie_id: str) -> bytes:
        return hashlib.blake2b(key + b"\0" + bookie_id.encode(), digest_size=8).digest()

    return sorted(bookie_ids, key=weight, reverse=True)


def _ms(seconds: float) -> int:
    return min(max(round(seconds * 1000), 0), _U32)


@attrs.define(eq=False)
class RemoteOwner:
    """The owner of ``log``/``name``, reached through ``client``'s bookie connections (a
    :class:`~bkframe.subscriptions.owner.SubscriptionOwner`)."""

    client: Any
    log: str
    name: str
    #: How long one call tries (owners failing over, bookies restarting) before it raises.
    failover_s: float = attrs.field(default=60.0, kw_only=True)
    #: The log's password: the owner checks it before it answers (docs/security.md).
    password: bytes = attrs.field(default=b"", kw_only=True, repr=False)
    #: Each request's timeout (a lease's: its wait plus this), and each metadata read's.
    request_timeout_s: float = attrs.field(default=10.0, kw_only=True)
    #: The bookie that answered last (asked first next time).
    bookie: str | None = attrs.field(default=None, init=False)

    # -- the owner's calls -------------------------------------------------------------------

    async def lease(self, consumer: str, max_records: int, wait_s: float, lease_s: float | None = None) -> list[Delivery]:
        count = min(max(max_records, 1), MAX_SUB_LEASE)
        wait_ms, lease_ms = _ms(wait_s), _ms(lease_s) if lease_s else 0
        reply = await self._call(
            table.SUB_LEASE,
            lambda rid: encode_sub_lease(
                rid, self.log, self.name, consumer, count, wait_ms, lease_ms, password=self.password
            ),
            wait_ms / 1000 + self.request_timeout_s,
        )
        return [
            Delivery(
                unpack(r.position), r.delivery_count, r.deadline_ms, r.payload, r.key, r.timestamp,
                r.properties or NO_PROPERTIES,
            )
            for r in reply.records
        ]

    async def settle(self, consumer: str, settle: Settle) -> None:
        lease_ms = _ms(settle.lease_s) if settle.lease_s else 0
        for part in _parts(settle):
            await self._call(
                table.SUB_SETTLE,
                lambda rid, p=part: encode_sub_settle(  # type: ignore[misc]
                    rid, self.log, self.name, consumer, acks=[pack(x) for x in p.acks],
                    ack_ranges=[(pack(a), pack(b)) for a, b in p.ack_ranges],
                    nacks=[(pack(x), _ms(d)) for x, d in p.nacks], extends=[pack(x) for x in p.extends], lease_ms=lease_ms,
                    password=self.password,
                ),
                self.request_timeout_s,
            )

    async def leave(self, consumer: str) -> None:
        await self._call(
            table.SUB_LEAVE, lambda rid: encode_sub_leave(rid, self.log, self.name, consumer, password=self.password),
            self.request_timeout_s,
        )

    async def stats(self) -> SubscriptionStats:
        r = await self._call(
            table.SUB_STATS, lambda rid: encode_sub_stats(rid, self.log, self.name, password=self.password),
            self.request_timeout_s,
        )
        return SubscriptionStats(
            backlog=r.backlog, in_flight=r.in_flight, waiting=r.waiting, delayed=r.delayed, delivered=r.delivered,
            redelivered=r.redelivered, acked=r.acked, dead_lettered=r.dead_lettered, mark_delete=unpack(r.mark_delete),
            consumers=r.consumers, owner=r.owner, epoch=r.epoch,
        )

    async def commit(
        self, consumer: str, positions: Sequence[Position], ledgers: Mapping[str, Iterable[int]], *,
        password: bytes | Mapping[str, bytes] = b"",
    ) -> dict[str, CommitResult]:
        """The owner acks ``positions`` with ``ledgers`` committed (SUB_COMMIT). A commit whose
        answer was lost is sent again like any call; if the first landed, the second is refused
        "acked already" (SubscriptionError): the output is in its logs once either way."""
        passwords = password if isinstance(password, Mapping) else {name: bytes(password) for name in ledgers}
        outputs = [SubOutput(name, tuple(ids), passwords.get(name, b"")) for name, ids in ledgers.items()]
        reply = await self._call(
            table.SUB_COMMIT,
            lambda rid: encode_sub_commit(
                rid, self.log, self.name, consumer, [pack(p) for p in positions], outputs, password=self.password
            ),
            self.request_timeout_s,
        )
        return {name: CommitResult("", tuple(segments)) for name, segments in reply.segments.items()}

    # -- finding the owner, retrying ------------------------------------------------------

    async def _call(self, operation: Operation[Any, P], encode: Callable[[int], Any], timeout_s: float) -> P:
        give_up = anyio.current_time() + self.failover_s
        pause = FIRST_PAUSE_S
        #: Bookies that said they host no owner, or could not be reached: passed over by the
        #: ranking for this call (not when the lock names them).
        passed: set[str] = set()
        redirect: str | None = None
        redirects = 0
        while True:
            error: Exception
            target = redirect
            redirect = None
            try:
                if target is None:
                    target = self.bookie or await self._find(passed)
                reply = await self._send(target, operation, encode, timeout_s)
            except ClientClosedError:
                raise  # this client is closing: nothing to try again
            except (BookieConnectionError, TimeoutError) as e:
                # The connection was lost, the bookie is down, or it did not answer in time.
                if target is not None:
                    passed.add(target)
                self.bookie = None
                error = e
            except NotOwnerError as e:  # the lock names a process that is no bookie (yet)
                self.bookie = None
                error = e
            else:
                status = reply.status
                if status == Status.OK:
                    self.bookie = target
                    return reply
                self.bookie = None
                why = f"bookie {target}: {reply.message}"
                if status == Status.NOT_OWNER:
                    error = NotOwnerError(why, holder=reply.holder or None)
                    if reply.holder and reply.holder != target and redirects < MAX_REDIRECTS:
                        redirect = reply.holder
                        redirects += 1
                        continue
                    if not reply.holder:
                        passed.add(target)
                elif status == Status.NO_SUBSCRIPTION:
                    raise NoSuchSubscriptionError(reply.message)
                elif status == Status.UNAUTHORIZED:
                    raise UnauthorizedError(why)
                elif status == Status.BAD_REQUEST:
                    raise SubscriptionError(why)
                else:  # IO_ERROR, TOO_MANY_REQUESTS, TRY_AGAIN: the owner or the bookie cannot now
                    error = SubscriptionError(f"{why} ({status.name})")
            redirects = 0
            if anyio.current_time() + pause > give_up:
                raise error
            await anyio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE_S)

    async def _send(self, bookie_id: str, operation: Operation[Any, P], encode: Callable[[int], Any], timeout_s: float) -> P:
        pool = self.client.pool
        conn = pool.connected(bookie_id)
        if conn is not None:
            # Connected: the request's own timeout bounds the wait (BookieTimeoutError), with
            # no cancel scope of its own per call.
            answer: P = await conn.submit(operation, encode, timeout_s=timeout_s).wait()
            return answer
        # The connect (if any) and the answer both within the call's time: a hung bookie
        # costs one timeout, then the call moves on.
        with anyio.fail_after(pool.connect_timeout_s + timeout_s):
            conn = await pool.get(bookie_id)
            reply: P = await conn.submit(operation, encode, timeout_s=timeout_s).wait()
        return reply

    async def _find(self, passed: set[str]) -> str:
        """The bookie to ask: the lock's holder, else the first of the ranking not passed over."""
        with anyio.fail_after(self.request_timeout_s):
            holder = await self.client.metadata.lock_holder(lock_name(self.log, self.name))
            view = await self.client.pool.bookies.view()
        if holder is not None:
            if holder not in view.addresses:
                view = await self.client.pool.bookies.view(fresh=True)
                if holder not in view.addresses:
                    raise NotOwnerError(
                        f"subscription {self.name!r} of log {self.log!r} is owned by {holder}, which is no registered "
                        "bookie (a process owning it itself, or a bookie gone whose lock has not expired yet)",
                        holder=holder,
                    )
            return str(holder)
        writable = [b.bookie_id for b in view.writable]
        if not writable:
            raise BookieConnectionError("no writable bookie is registered to own the subscription")
        ranked = rendezvous(self.log, self.name, writable)
        for bookie_id in ranked:
            if bookie_id not in passed:
                return bookie_id
        passed.clear()  # every one passed over: start the ranking again
        return ranked[0]


def _parts(settle: Settle) -> list[Settle]:
    """``settle`` in parts of at most MAX_SUB_SETTLE items (one request each)."""
    kinds = ("acks", "ack_ranges", "nacks", "extends")
    if sum(len(getattr(settle, k)) for k in kinds) <= MAX_SUB_SETTLE:
        return [settle]
    parts: list[Settle] = []
    for kind in kinds:
        items = list(getattr(settle, kind))
        for i in range(0, len(items), MAX_SUB_SETTLE):
            parts.append(Settle(**{kind: items[i : i + MAX_SUB_SETTLE]}, lease_s=settle.lease_s))  # type: ignore[arg-type]
    return parts
