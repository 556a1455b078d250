"""The bookie's TCP server: frames in, response batches out, graceful drain on stop.

Each connection has a reader and a writer task. The reader parses a frame, lets the
bookie serve it at once (storage write + journal append) and queues the resulting batch;
the writer takes every batch queued, lets the request side wait until their answers may
leave (:meth:`RequestHandler.durable_answers <bkframe.bookie.requests.RequestHandler.durable_answers>`:
the journal's group commit, the entry-log fsync of large entries) and sends them. So a
client can pipeline many frames while earlier ones wait for their fsync, and responses
of all batches made durable by one fsync go out in one send.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import trio

from bkframe import proto as p
from bkframe.bookie.bookie import Bookie
from bkframe.bookie.handshake import AuthGate, open_connection
from bkframe.bookie.response_batch import ResponseBatch
from bkframe.core.interfaces import Buffer
from bkframe.core.tls import server_context

log = logging.getLogger("bkframe.server")

RECEIVE_SIZE = 256 * 1024
#: Seconds a closing TLS connection may take to send its close_notify.
CLOSE_TIMEOUT_S = 1.0


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
        #: ``[tls] enabled``: every connection must be TLS (see :mod:`.handshake`).
        self._tls = server_context(tls) if tls.enabled else None
        self._debug = log.isEnabledFor(logging.DEBUG)
        self._outboxes: dict[trio.abc.Stream, _Outbox] = {}

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
        self._connections += 1
        self._idle = trio.Event() if self._connections == 1 else self._idle
        stream: trio.abc.Stream = raw
        try:
            # A stop ends the wait for a client's first bytes, as it ends a reader's wait.
            opened = None
            with trio.CancelScope() as waiting:
                self._readers.add(waiting)
                try:
                    opened = await open_connection(raw, self._tls)
                finally:
                    self._readers.discard(waiting)
            if opened is None:
                return
            stream, peer = opened
            gate = AuthGate(self.bookie.auth, peer, self.bookie.access)
            send, receive = trio.open_memory_channel[ResponseBatch](self.bookie.config.bookie.max_pending_batches)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_responses, stream, receive)
                async with send:
                    await self._read_requests(stream, gate, send, nursery)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            # The peer went away (or reset the connection); nothing it sent is lost, it
            # just gets no answer. (The connection's nursery raises these in a group.)
            log.debug("connection closed by the peer")
        except* Exception:
            # A bug on one connection must not take the bookie or other connections down.
            log.exception("connection failed; closing it")
        finally:
            self._connections -= 1
            if self._connections == 0:
                self._idle.set()
            with trio.CancelScope(shield=True):
                # TLS sends close_notify first: bounded, a peer that reads nothing cannot
                # hold this task (the socket is closed whatever happens).
                with trio.move_on_after(CLOSE_TIMEOUT_S):
                    await stream.aclose()
                await raw.aclose()

    async def _respond_later(
        self, respond: Callable[[], Awaitable[bytes]], send: trio.MemorySendChannel[ResponseBatch], stream: trio.abc.Stream
    ) -> None:
        async with send:
            response = await respond()
            out = self._outboxes.get(stream)
            if out is not None:
                out.idle = False  # handed over: later answers go after it
            try:
                await send.send(ResponseBatch([response]))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the connection is gone

    def _outbox(self, stream: trio.abc.Stream) -> _Outbox:
        """The connection's outbox, shared by its reader and writer (made by the first)."""
        out = self._outboxes.get(stream)
        if out is None:
            out = self._outboxes[stream] = _Outbox(stream)
        return out

    async def _read_requests(
        self, stream: trio.abc.Stream, gate: AuthGate, send: trio.MemorySendChannel[ResponseBatch], nursery: trio.Nursery
    ) -> None:
        out = self._outbox(stream)
        bookie = self.bookie
        max_entry = bookie.config.bookie.max_entry_size
        buf = bytearray()
        with trio.CancelScope() as scope:
            self._readers.add(scope)
            try:
                # Nothing is served before boot protection (BP-46 phase one) is durable.
                await bookie.ready.wait()
                if self._stop.is_set():
                    return
                while True:
                    # Parse every whole frame in the buffer before reading more.
                    while len(buf) >= 4:
                        (length,) = p.FRAME_HEADER.unpack_from(buf)
                        if length > p.MAX_FRAME_SIZE:
                            bookie.counters.bad_requests += 1
                            msg = f"frame of {length} bytes exceeds the maximum {p.MAX_FRAME_SIZE}; closing"
                            batch = ResponseBatch([p.encode_error_response(0, p.Status.BAD_REQUEST, msg)])
                            await send.send(batch)
                            return
                        if len(buf) < 4 + length:
                            break
                        with memoryview(buf) as view:  # one copy; released before the del below
                            body = memoryview(bytes(view[4 : 4 + length]))
                        del buf[: 4 + length]
                        requests = p.decode_requests(body, max_entry)
                        if self._debug:
                            log.debug("%s: requests %s", gate.peer.address, _describe(requests))
                        if not gate.authenticated or (requests and type(requests[0]) is p.AuthRequest):
                            # Before AUTH succeeds nothing reaches the bookie's requests.
                            answers, requests = gate.check(requests)
                            if answers:
                                out.idle = False  # handed over: later answers go after it
                                with trio.CancelScope(shield=True):
                                    await send.send(ResponseBatch(list(answers)))
                        if not requests:
                            continue
                        # Shield the hand-off: a frame that was served (written to the
                        # journal) must also be answered, even while draining.
                        batch = bookie.requests.handle(requests, gate.access)
                        for later in batch.deferred:
                            nursery.start_soon(self._respond_later, later, send.clone(), stream)
                        if out.idle and not batch.waits and not scope.cancel_called and not _whole_frame(buf):
                            # Nothing to wait for, nothing queued before it and no further
                            # whole frame read (those the writer answers with one send):
                            # answer now, not one scheduler pass later in the writer (BYPASS
                            # and VD adds, reads). Not while draining: the writer's send may
                            # outlive this task's cancel scope, this one may not (see _Outbox).
                            await out.send(p.frame(batch.parts))
                            bookie.requests.answered((batch,))
                            continue
                        out.idle = False  # handed over: later answers go after it
                        with trio.CancelScope(shield=True):
                            await send.send(batch)
                    data = await stream.receive_some(max(RECEIVE_SIZE, _needed(buf)))
                    if not data:
                        return
                    buf += data
            finally:
                self._readers.discard(scope)

    async def _write_responses(self, stream: trio.abc.Stream, receive: trio.MemoryReceiveChannel[ResponseBatch]) -> None:
        out = self._outbox(stream)
        try:
            await self._answer(out, receive)
        finally:
            del self._outboxes[stream]

    async def _answer(self, out: _Outbox, receive: trio.MemoryReceiveChannel[ResponseBatch]) -> None:
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
                    await out.send(p.frame(parts))
                requests.answered(batches)


class _Outbox:
    """A connection's sending side, shared by its writer task and its reader.

    The reader answers a frame itself when the writer is idle (parked on an empty queue)
    and the answer waits for nothing: then no earlier answer is pending on this connection,
    so answers keep their order. The lock keeps the two from sending at once (a deferred
    answer may wake the writer while the reader sends). The reader's send is not shielded
    from stop(): a drain that catches it blocked on a full socket buffer ends the
    connection with that answer unsent, and an unanswered request acknowledged nothing."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        #: The writer waits for a batch and holds none.
        self.idle = False
        self._lock = trio.Lock()

    async def send(self, data: Buffer) -> None:
        try:
            self._lock.acquire_nowait()  # the usual case: no extra scheduler pass
        except trio.WouldBlock:
            await self._lock.acquire()
        try:
            await self.stream.send_all(data)
        finally:
            self._lock.release()


def _whole_frame(buf: bytearray) -> bool:
    """``buf`` starts with a whole frame (or a length no frame may have)."""
    if len(buf) < 4:
        return False
    (length,) = p.FRAME_HEADER.unpack_from(buf)
    return length > p.MAX_FRAME_SIZE or len(buf) >= 4 + length


def _needed(buf: bytearray) -> int:
    if len(buf) < 4:
        return 0
    (length,) = p.FRAME_HEADER.unpack_from(buf)
    return min(4 + length - len(buf), p.MAX_FRAME_SIZE) if length <= p.MAX_FRAME_SIZE else 0


def _describe(requests: Sequence[p.Request | p.BadMessage]) -> str:
    """Requests as ``OP#id(ledger L)`` for debug logs: ids only, never keys, tokens or data."""
    out = []
    for r in requests:
        ledger = getattr(r, "ledger_id", None)
        where = f"(ledger {ledger})" if ledger is not None else ""
        out.append(f"{type(r).__name__.removesuffix('Request')}#{r.request_id}{where}")
    return ", ".join(out)
