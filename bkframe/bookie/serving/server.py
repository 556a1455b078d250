"""The bookie's TCP server: frames in, response batches out, graceful drain on stop.

Each connection has a reader and a writer task. The reader parses a frame, lets the
bookie serve it at once (storage write + journal append) and queues the resulting batch;
the writer takes every batch queued, lets the request side wait until their answers may
leave (:meth:`RequestHandler.durable_answers <bkframe.bookie.requests.RequestHandler.durable_answers>`:
the journal's group commit, the entry-log fsync of large entries) and sends them. So a
client can pipeline many frames while earlier ones wait for their fsync, and responses
of all batches made durable by one fsync go out in one send.

What one client, or many, may make the server hold is bounded (``[limits]``; docs/security.md,
"Hostile clients"): connections in all and per peer address (:mod:`bkframe.bookie.serving.connection_caps`,
refused at accept); before AUTH succeeds, frames of at most
:data:`~bkframe.bookie.serving.handshake.MAX_FRAME_BEFORE_AUTH` bytes, one AUTH guess and
``auth_timeout_s``; the bytes of frames in flight and their answers (:mod:`bkframe.bookie.serving.inflight_memory`:
the reader waits for room before it reads a frame's body); the long polls of a connection,
which wait as records and end with it (:mod:`bkframe.bookie.lac_waiters`), and its subscription
calls, which end with it too (:mod:`bkframe.bookie.subscription_calls`); a frame must arrive whole in
``frame_timeout_s`` and an answer be taken in ``send_timeout_s``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import attrs
import trio

from bkframe.bookie.access import Access
from bkframe.bookie.bookie import Bookie
from bkframe.bookie.lac_waiters import ConnectionPolls
from bkframe.bookie.response_batch import ResponseBatch
from bkframe.bookie.runtime.throttled_log import ThrottledWarning
from bkframe.bookie.serving.connection import ConnectionReader, Outbox
from bkframe.bookie.serving.connection_caps import ConnectionCaps
from bkframe.bookie.serving.handshake import MAX_FRAME_BEFORE_AUTH, AuthGate, open_connection
from bkframe.bookie.serving.inflight_memory import ConnectionMemory, FrameMemory, InflightMemory
from bkframe.bookie.subscription_calls import ConnectionCalls
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.auth import Peer
from bkframe.proto.base import BadMessage
from bkframe.proto.codes import MAX_FRAME_SIZE, Status
from bkframe.proto.frames import FrameBuffer, FrameTooLarge, pack_frame
from bkframe.proto.ops.connection_setup import AuthRequest
from bkframe.proto.table import Request, decode_requests, encode_error_response
from bkframe.proto.tls import server_context

log = logging.getLogger("bkframe.server")

RECEIVE_SIZE = 256 * 1024
#: Seconds a closing TLS connection may take to send its close_notify.
CLOSE_TIMEOUT_S = 1.0
#: Seconds a refused connection gets to take its error frame before it is closed.
REFUSAL_TIMEOUT_S = 1.0
#: Seconds between looks for clients that take no answers (``[limits] send_timeout_s``).
SLOW_READER_CHECK_S = 1.0
#: A frame's requests are served in parts of about this many bytes of answers: a frame of
#: many reads of large entries waits for room in the in-flight budget between parts.
ANSWER_CHUNK_BYTES = 4 * 1024 * 1024
#: ... and of about this much time: the rest waits for the next turn of the event loop, so
#: that no frame (say 300 adds to ledgers whose indexes must be opened) holds it for long.
SERVE_STEP_S = 0.01


class BookieServer:
    def __init__(self, bookie: Bookie, host: str, port: int) -> None:
        self.bookie = bookie
        self.host = host
        self.port = port
        self._stop = trio.Event()
        self._readers: set[trio.CancelScope] = set()
        self._connections = 0
        self._idle = trio.Event()
        self._idle.set()
        tls = bookie.config.tls
        #: ``[tls] enabled``: every connection must be TLS (see :mod:`bkframe.bookie.serving.handshake`).
        self._tls = server_context(tls) if tls.enabled else None
        self._debug = log.isEnabledFor(logging.DEBUG)
        limits = self.limits = bookie.config.limits
        self._caps = ConnectionCaps(limits, bookie.counters)
        #: Bytes of requests in flight, over all connections.
        self.memory = InflightMemory(limits.max_inflight_bytes, limits.max_inflight_bytes_per_address, bookie.counters)
        self._auth_refusals = ThrottledWarning(log)
        # One throttled warning per kind of closing, so that a flood of one hides no other.
        self._slow_readers = ThrottledWarning(log)
        self._slow_frames = ThrottledWarning(log)
        self._early_frames = ThrottledWarning(log)
        self._unauthenticated = ThrottledWarning(log)
        self._open: set[_Connection] = set()

    @property
    def connections(self) -> int:
        """Connections open now (for the metrics)."""
        return self._connections

    def stop(self) -> None:
        """Stop accepting, let live connections finish what they sent, then return from run."""
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as connections:
            connections.start_soon(self._close_slow_readers)
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(partial(trio.serve_listeners, self._serve, [listener], handler_nursery=connections))
                task_status.started((self.host, self.port))
                await self._stop.wait()
                accepting.cancel_scope.cancel()
            for listener in listeners:
                await listener.aclose()
            # Stop reading new frames; what was read is served and answered.
            for scope in list(self._readers):
                scope.cancel()
            with trio.move_on_after(self.bookie.config.bookie.drain_timeout_s):
                await self._idle.wait()
            connections.cancel_scope.cancel()

    async def _serve(self, raw: trio.SocketStream) -> None:
        """One connection, from its accept to its close.

        Long on purpose: admission, the TLS and AUTH deadline, serving, and the accounting
        the ``finally`` undoes are one ``try``, so that every way out undoes the same things.
        """
        address = _peer_ip(raw)
        refusal = self._caps.admit(address)
        if refusal is not None:
            await self._refuse(raw, refusal)
            return
        self._connections += 1
        self._idle = trio.Event() if self._connections == 1 else self._idle
        stream: trio.abc.Stream = raw
        conn: _Connection | None = None
        limits = self.limits
        # A client of a bookie that requires AUTH has auth_timeout_s from its accept (its
        # first bytes, a TLS handshake and the AUTH itself); others may stay idle (capped).
        auth_deadline = trio.current_time() + limits.auth_timeout_s if self.bookie.auth.requires_auth else math.inf
        try:
            # A stop ends the wait for a client's first bytes, as it ends a reader's wait.
            opened = None
            with trio.CancelScope(deadline=auth_deadline) as waiting:
                self._readers.add(waiting)
                try:
                    opened = await open_connection(raw, self._tls)
                finally:
                    self._readers.discard(waiting)
            if opened is None:
                if waiting.cancelled_caught and not self._stop.is_set():
                    self.bookie.counters.connections_closed_unauthenticated += 1
                return
            stream, peer = opened
            gate = AuthGate(self.bookie.auth, peer, self.bookie.access, self._auth_refusals)
            polls = self.bookie.context.lac_waiters.connection(
                max_waiting=limits.max_long_polls_per_connection,
                max_total=limits.max_long_polls,
                max_timeout_s=limits.max_long_poll_timeout_s,
            )
            subs = self.bookie.context.subscriptions.connection()
            send, receive = trio.open_memory_channel[ResponseBatch](self.bookie.config.bookie.max_pending_batches)
            async with trio.open_nursery() as nursery:
                conn = _Connection(ConnectionMemory(self.memory, address), Outbox(stream), polls, subs, nursery.cancel_scope)
                self._open.add(conn)
                nursery.start_soon(self._answer, conn, receive)
                nursery.start_soon(self._answer_later, conn, conn.polls.run, send.clone())
                nursery.start_soon(self._answer_later, conn, conn.subs.run, send.clone())
                try:
                    async with send:
                        await self._read_requests(conn, gate, send, nursery, auth_deadline)
                finally:
                    # The client left, sent what it could, or the bookie stops: the
                    # connection's long polls are answered now and end with it, and so
                    # do its subscription calls (its consumers then leave).
                    polls.close()
                    subs.close()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            # The peer went away (or reset the connection); nothing it sent is lost, it
            # just gets no answer. (The connection's nursery raises these in a group.)
            log.debug("connection closed by the peer")
        except* Exception:
            # A bug on one connection must not take the bookie or other connections down.
            log.exception("connection failed; closing it")
        finally:
            self._caps.release(address)
            if conn is not None:
                self._open.discard(conn)
                conn.memory.close()
                if conn.too_slow:
                    self.bookie.counters.connections_closed_slow += 1
                    self._slow_readers.warn(
                        "closed the connection from %s: it took none of the bookie's answers in %s s "
                        "([limits] send_timeout_s)", address, self.limits.send_timeout_s,
                    )
            self._connections -= 1
            if self._connections == 0:
                self._idle.set()
            with trio.CancelScope(shield=True):
                # TLS sends close_notify first: bounded, a peer that reads nothing cannot
                # hold this task (the socket is closed whatever happens).
                with trio.move_on_after(CLOSE_TIMEOUT_S):
                    await stream.aclose()
                await raw.aclose()

    async def _close_slow_readers(self) -> None:
        """Close the connections whose client has not taken an answer in ``send_timeout_s``
        (one task for all: a deadline on every send would cost each answer a cancel scope)."""
        while True:
            await trio.sleep(SLOW_READER_CHECK_S)
            late = trio.current_time() - self.limits.send_timeout_s
            for conn in self._open:
                if conn.outbox.sending_since < late:
                    conn.too_slow = True
                    conn.cancel_scope.cancel()

    async def _refuse(self, raw: trio.SocketStream, why: str) -> None:
        """Close a connection beyond a cap at once; a plaintext client first gets ``why``
        in an error frame (a TLS client would need a handshake first: it just sees the close)."""
        try:
            if self._tls is None:
                with trio.move_on_after(REFUSAL_TIMEOUT_S):
                    await raw.send_all(pack_frame([encode_error_response(0, Status.TOO_MANY_REQUESTS, why)]))
                    await raw.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await raw.aclose()

    async def _respond_later(
        self,
        respond: Callable[[], Awaitable[bytes]],
        send: trio.MemorySendChannel[ResponseBatch],
        conn: _Connection,
        done: Callable[[], None],
    ) -> None:
        """Send what ``respond`` returns, then ``done()`` (the frame's memory may go)."""
        async with send:
            try:
                response = await respond()
                conn.outbox.idle = False  # handed over: later answers go after it
                try:
                    await send.send(ResponseBatch([response]))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # the connection is gone
            finally:
                done()

    async def _answer_later(
        self, conn: _Connection, run: Callable[[Callable[[list[bytes]], Awaitable[None]]], Awaitable[None]],
        send: trio.MemorySendChannel[ResponseBatch],
    ) -> None:
        """Send the answers ``run`` gives as they come (the connection's long polls, its
        SUB_* calls), until the connection closes."""

        async def deliver(answers: list[bytes]) -> None:
            if conn.outbox.idle:
                # The writer holds nothing (no earlier answer waits for the journal): sent
                # from here, not a scheduler pass later by the writer (a subscription's
                # confirmed ack is one such answer a record). The outbox's lock orders it
                # with a send the writer or the reader starts meanwhile.
                await conn.outbox.send(pack_frame(answers))
                return
            conn.outbox.idle = False  # handed over: later answers go after it
            parts: list[Buffer] = list(answers)
            await send.send(ResponseBatch(parts))

        async with send:
            try:
                await run(deliver)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the connection is gone

    async def _close_with(
        self,
        send: trio.MemorySendChannel[ResponseBatch],
        status: Status,
        message: str,
        peer: Peer | None = None,
        warning: ThrottledWarning | None = None,
    ) -> None:
        """Answer ``message`` (and log it as ``warning``); the reader then returns, so the
        connection closes once it is sent."""
        if peer is not None and warning is not None:
            warning.warn("closed the connection from %s: %s", peer.address, message)
        with trio.CancelScope(shield=True):
            await send.send(ResponseBatch([encode_error_response(0, status, message)]))

    async def _refuse_frame(self, send: trio.MemorySendChannel[ResponseBatch], error: FrameTooLarge, gate: AuthGate) -> None:
        """Answer a frame refused at its header (its body is never read), then close."""
        if error.length > MAX_FRAME_SIZE:
            self.bookie.counters.bad_requests += 1
            msg = f"frame of {error.length} bytes exceeds the maximum {MAX_FRAME_SIZE}; closing"
            await self._close_with(send, Status.BAD_REQUEST, msg)
            return
        msg = (
            f"frame of {error.length} bytes before authentication (at most {MAX_FRAME_BEFORE_AUTH} "
            f"until AUTH succeeds: send AUTH first); closing"
        )
        self.bookie.counters.connections_closed_unauthenticated += 1
        await self._close_with(send, Status.UNAUTHORIZED, msg, gate.peer, self._early_frames)

    async def _read_requests(
        self,
        conn: _Connection,
        gate: AuthGate,
        send: trio.MemorySendChannel[ResponseBatch],
        nursery: trio.Nursery,
        auth_deadline: float,
    ) -> None:
        """Read frames and serve them until the client leaves, breaks a bound, or the bookie
        stops (the frames themselves: :class:`~bkframe.proto.frames.FrameBuffer`)."""
        frames = FrameBuffer(MAX_FRAME_SIZE if gate.authenticated else MAX_FRAME_BEFORE_AUTH)
        reader = ConnectionReader(frames, auth_deadline, conn.outbox.stream)
        limits = self.limits
        with trio.CancelScope() as scope:
            self._readers.add(scope)
            try:
                # Nothing is served before boot protection (BP-46 phase one) is durable.
                await self.bookie.ready.wait()
                if self._stop.is_set():
                    return
                if gate.authenticated:
                    reader.auth_deadline = math.inf
                elif reader.auth_deadline < trio.current_time() + limits.auth_timeout_s:
                    # Connected while the bookie was booting: the time counts from now.
                    reader.auth_deadline = trio.current_time() + limits.auth_timeout_s
                while True:
                    # Serve every whole frame received before reading more.
                    while True:
                        try:
                            body = reader.frames.next_frame()
                        except FrameTooLarge as e:
                            await self._refuse_frame(send, e, gate)
                            return
                        if body is None:
                            break
                        if not await self._serve_frame(conn, gate, reader, body, send, nursery, scope):
                            return
                    if not await self._receive(conn, gate, reader, send):
                        return
            finally:
                self._readers.discard(scope)

    async def _serve_frame(
        self,
        conn: _Connection,
        gate: AuthGate,
        reader: ConnectionReader,
        body: memoryview,
        send: trio.MemorySendChannel[ResponseBatch],
        nursery: trio.Nursery,
        scope: trio.CancelScope,
    ) -> bool:
        """Serve one frame's requests (after the auth gate); False: close the connection."""
        size = 4 + len(body)
        reader.held -= size  # the frame's memory goes with its answers now
        reader.frame_deadline = math.inf
        requests = decode_requests(body, self.bookie.config.bookie.max_entry_size)
        if self._debug:
            log.debug("%s: requests %s", gate.peer.address, _describe(requests))
        frame = FrameMemory(conn.memory, size)
        try:
            if not gate.authenticated or (requests and type(requests[0]) is AuthRequest):
                # Before AUTH succeeds nothing reaches the bookie's requests (and an AUTH
                # that starts a frame sets what the connection may read).
                answers, requests = gate.check(requests)
                if answers:
                    conn.outbox.idle = False  # handed over: later answers go after it
                    with trio.CancelScope(shield=True):
                        await send.send(ResponseBatch(list(answers), on_answered=frame.hold()))
                if gate.refused:
                    # One guess per connection: the answer goes, then the connection.
                    self.bookie.counters.connections_closed_unauthenticated += 1
                    return False
                if gate.authenticated:
                    reader.auth_deadline = math.inf
                    reader.frames.max_frame_size = MAX_FRAME_SIZE
            pending: Sequence[Request | BadMessage] = requests
            while pending:
                pending = await self._serve_some(conn, pending, gate.access, frame, send, nursery, scope, reader.frames)
                if pending:
                    # A frame served in steps (many large reads, or adds that took long): the
                    # rest once there is room, and after the other tasks had their turn (the
                    # hand-over of the step's answers may have taken no pass at all).
                    reader.held = await conn.memory.wait_for_room(reader.held, RECEIVE_SIZE)
                    await trio.lowlevel.checkpoint()
        finally:
            frame.done()
        return True

    async def _receive(
        self, conn: _Connection, gate: AuthGate, reader: ConnectionReader, send: trio.MemorySendChannel[ResponseBatch]
    ) -> bool:
        """Receive more bytes, within the connection's budget and deadlines; False: close
        the connection (the client left, or took too long to authenticate or to send a frame)."""
        limits = self.limits
        frames = reader.frames
        data: bytes | bytearray | None = None
        want = 0
        slow = False
        # Room in the budget before reading on: for a whole frame once its header is in,
        # else to read at all. (Cancel scopes only where a deadline runs: they cost every
        # frame otherwise.)
        with _deadline(reader.auth_deadline):
            want = frames.frame_size()
            if want:
                if reader.held < want:
                    reader.held = await conn.memory.reserve(reader.held, want)
                if reader.frame_deadline == math.inf:
                    reader.frame_deadline = trio.current_time() + limits.frame_timeout_s
            else:
                reader.held = await conn.memory.wait_for_room(reader.held, RECEIVE_SIZE)
            with _deadline(reader.frame_deadline) as receiving:
                try:
                    data = await reader.receive(max(RECEIVE_SIZE, frames.missing()))
                except OSError as e:
                    raise trio.BrokenResourceError(f"the connection failed: {e}") from e
            slow = receiving is not None and receiving.cancelled_caught
        if slow:
            msg = (
                f"a frame of {want} bytes did not arrive whole in {limits.frame_timeout_s} s "
                "([limits] frame_timeout_s); closing"
            )
            self.bookie.counters.connections_closed_slow += 1
            await self._close_with(send, Status.BAD_REQUEST, msg, gate.peer, self._slow_frames)
            return False
        if data is None:
            msg = f"not authenticated in {limits.auth_timeout_s} s ([limits] auth_timeout_s); closing"
            self.bookie.counters.connections_closed_unauthenticated += 1
            await self._close_with(send, Status.UNAUTHORIZED, msg, gate.peer, self._unauthenticated)
            return False
        if not data:
            return False
        frames.feed(data)
        if frames.buffered > reader.held:
            conn.memory.charge(frames.buffered - reader.held)
            reader.held = frames.buffered
        return True

    async def _serve_some(
        self,
        conn: _Connection,
        requests: Sequence[Request | BadMessage],
        access: Access,
        frame: FrameMemory,
        send: trio.MemorySendChannel[ResponseBatch],
        nursery: trio.Nursery,
        scope: trio.CancelScope,
        frames: FrameBuffer,
    ) -> Sequence[Request | BadMessage]:
        """Serve a frame's requests, up to about ANSWER_CHUNK_BYTES of answers or SERVE_STEP_S
        of work; hand the answers over (or send them at once); return the requests left to
        serve."""
        out = conn.outbox
        bookie = self.bookie
        batch = bookie.requests.handle(requests, access, answer_limit=ANSWER_CHUNK_BYTES, time_limit_s=SERVE_STEP_S)
        for req in batch.long_polls:
            now = conn.polls.wait(req)
            if now is not None:
                batch.parts.append(now)
        for call in batch.subscription_calls:
            answer = conn.subs.call(call)
            if answer is not None:
                batch.parts.append(answer)
        for later in batch.deferred:
            # Deferred answers keep the frame's requests, and so its memory, until they are sent.
            nursery.start_soon(self._respond_later, later, send.clone(), conn, frame.hold())
        answer_size = sum(map(len, batch.parts))  # in C: a READ_BATCH answer has a part per entry
        conn.memory.charge(answer_size)
        batch.on_answered = frame.hold(answer_size)
        if out.idle and not batch.waits and not scope.cancel_called and not frames.has_frame():
            # Nothing to wait for, nothing queued before it and no further whole frame read
            # (those the writer answers with one send): answer now, not one scheduler pass
            # later in the writer (BYPASS and VD adds, reads). Not while draining: the
            # writer's send may outlive this task's cancel scope, this one may not (see .outbox).
            # A frame whose answers all come later (a long poll, a subscription call) sends
            # nothing: an empty frame would cost a send here and a wake-up at the client.
            if batch.parts:
                await out.send(pack_frame(batch.parts))
            bookie.requests.answered((batch,))
            batch.on_answered()
        else:
            # Hand it over at once when the queue has room (the channel's send would take a
            # scheduler pass of its own), else wait shielded: a frame that was served
            # (written to the journal) must also be answered, even while draining.
            out.idle = False  # handed over: later answers go after it
            try:
                send.send_nowait(batch)
            except trio.WouldBlock:
                with trio.CancelScope(shield=True):
                    await send.send(batch)
        return requests[len(batch.requests) :]

    async def _answer(self, conn: _Connection, receive: trio.MemoryReceiveChannel[ResponseBatch]) -> None:
        out = conn.outbox
        requests = self.bookie.requests
        async with receive:
            while True:
                try:
                    batch = receive.receive_nowait()
                except trio.WouldBlock:
                    out.idle = True
                    try:
                        batch = await receive.receive()
                    except trio.EndOfChannel:
                        return
                    finally:
                        out.idle = False
                except trio.EndOfChannel:
                    return
                batches = [batch]
                # Coalesce batches already queued behind this one into a single send.
                while True:
                    try:
                        batches.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                parts = await requests.durable_answers(batches)
                if parts:
                    await out.send(pack_frame(parts))
                requests.answered(batches)
                for b in batches:
                    if b.on_answered is not None:
                        b.on_answered()


@attrs.define(eq=False)
class _Connection:
    """What one connection's tasks share: where it sends, its long polls, and the bytes of
    the in-flight budget it holds."""

    memory: ConnectionMemory
    outbox: Outbox
    polls: ConnectionPolls
    #: Its SUB_* calls under way (:mod:`bkframe.bookie.subscription_calls`).
    subs: ConnectionCalls
    #: Cancels the connection's tasks (it is then closed).
    cancel_scope: trio.CancelScope
    #: Closed because its client took no answer in ``send_timeout_s``.
    too_slow: bool = False


_NO_DEADLINE = contextlib.nullcontext()


def _deadline(deadline: float) -> contextlib.AbstractContextManager[trio.CancelScope | None]:
    """A cancel scope with ``deadline``, or nothing (``None``) when it is infinite."""
    return trio.CancelScope(deadline=deadline) if deadline != math.inf else _NO_DEADLINE


def _peer_ip(raw: trio.SocketStream) -> str:
    """The client's address without its port: connections are counted per address."""
    try:
        return str(raw.socket.getpeername()[0])
    except OSError:
        return "?"


def _describe(requests: Sequence[Request | BadMessage]) -> str:
    """Requests as ``OP#id(ledger L)`` for debug logs: ids only, never keys, tokens or data."""
    out = []
    for r in requests:
        ledger = getattr(r, "ledger_id", None)
        where = f"(ledger {ledger})" if ledger is not None else ""
        out.append(f"{type(r).__name__.removesuffix('Request')}#{r.request_id}{where}")
    return ", ".join(out)
