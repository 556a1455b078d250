"""A pipelined connection to one bookie (the transport under the client library).

Requests submitted while a send is in progress are coalesced into the next frame, so a
writer with many adds in flight sends few large frames; responses are matched to their
requests by request id, whatever order the bookie answers in.

Every connection says, after its AUTH, that it understands TRY_AGAIN (FEATURES). A request
answered TRY_AGAIN (the bookie cannot decide it yet: its metadata store has not vouched for
a new ledger's key) is sent again, the same bytes to the same bookie, after
:data:`TRY_AGAIN_BACKOFF_S`, each try with the request's own timeout, until ``try_again_s``
has passed since it was first sent; only then does its caller see the TRY_AGAIN answer (a
failure of that bookie). Callers never see the tries: a writer's pipeline, ensemble and
entry order are untouched, an entry retried this way is only acknowledged later.
"""

from __future__ import annotations

import heapq
import itertools
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import sniffio
from anyio.streams.tls import TLSStream

from bkframe.client.bookies.asyncio_stream import connect_asyncio
from bkframe.client.bookies.direct_socket import nonblocking_send, readable_receiver, scattered_sender
from bkframe.client.bookies.errors import BookieConnectionError, BookieTimeoutError, ClientClosedError
from bkframe.client.bookies.pending_response import PendingResponse, R
from bkframe.core.interfaces import Buffer
from bkframe.errors import BKError, ProtocolError, UnauthorizedError
from bkframe.proto import table
from bkframe.proto.codes import FRAME_HEADER, TARGET_FRAME_SIZE, Feature, Status
from bkframe.proto.frames import FrameBuffer, pack_frame
from bkframe.proto.ops.add import AddResponse, encode_add
from bkframe.proto.ops.add_batch import AddBatchResponse, encode_add_batch
from bkframe.proto.ops.bookie_info import encode_bookie_info
from bkframe.proto.ops.connection_setup import AuthResponse, FeaturesResponse, encode_auth, encode_features
from bkframe.proto.ops.list_entries import ListEntriesResponse, encode_list_entries
from bkframe.proto.ops.read import ReadResponse, encode_read
from bkframe.proto.ops.read_batch import ReadBatchResponse, encode_read_batch
from bkframe.proto.ops.read_lac import ReadLacResponse, encode_read_lac
from bkframe.proto.ops.sync import SyncResponse, encode_sync
from bkframe.proto.ops.write_close import WriteCloseResponse, encode_write_close
from bkframe.proto.ops.write_lac import WriteLacResponse, encode_write_lac
from bkframe.proto.table import Operation, Response, decode_responses

#: Requests without a timeout of their own get this one: nothing waits on a bookie forever.
DEFAULT_REQUEST_TIMEOUT_S = 30.0
#: A request answered TRY_AGAIN is sent again this long after the answer (the bookie held
#: it ``key_check_wait_s`` already)...
TRY_AGAIN_BACKOFF_S = 0.05
#: ... until this long after it was first sent (ClientSettings.try_again_timeout_s).
DEFAULT_TRY_AGAIN_S = 15.0


#: A frame whose parts average at least this many bytes is sent from the parts (``writev``).
SCATTER_PART_BYTES = 4096
#: Receive this much at a time (a frame larger than that arrives in several receives).
RECEIVE_SIZE = 256 * 1024


class BookieClient:
    """Use :func:`connect_bookie` to make one."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        address: str,
        *,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        try_again_s: float = DEFAULT_TRY_AGAIN_S,
        on_try_again: Callable[[], None] | None = None,
    ) -> None:
        self.address = address
        #: Timeout of requests submitted without one.
        self.request_timeout_s = request_timeout_s
        #: How long after its first send a request answered TRY_AGAIN is still sent again.
        self.try_again_s = try_again_s
        #: Requests sent again after a TRY_AGAIN answer, and who else counts them.
        self.tries_again = 0
        self._on_try_again = on_try_again
        #: The :class:`~bkframe.proto.Feature` bits the bookie said it uses here (FEATURES).
        self.features = 0
        #: (when, request id, pending) of requests to send again, in time order.
        self._resends: deque[tuple[float, int, PendingResponse[Any]]] = deque()
        self._resend_wake = anyio.Event()
        self._stream = stream
        self._ids = itertools.count(1)
        self._pending: dict[int, PendingResponse[Any]] = {}
        self._outgoing: list[Buffer] = []
        #: Bytes in ``_outgoing`` and the part indices where a frame may be cut.
        self._outgoing_size = 0
        self._cuts: list[int] = []
        #: Requests in ``_outgoing``: if they are all that is pending, nothing is on the wire.
        self._queued = 0
        self._wake_sender = anyio.Event()
        #: A non-blocking send (None: TLS, anyio's asyncio stream), whether the send loop holds
        #: frames, and the unsent tail of a frame sent directly (the loop sends it first).
        self._send_now = nonblocking_send(stream)
        self._send_scattered = scattered_sender(stream)
        self._sending = False
        self._rest: memoryview | None = None
        self._closed: BaseException | None = None
        self._closed_event = anyio.Event()
        #: (deadline, request id) of requests in flight; answered ones are dropped lazily.
        self._deadlines: list[tuple[float, int]] = []
        self._earlier_deadline = anyio.Event()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    # -- submission ----------------------------------------------------------------------

    def _submit(self, kind: type[R], request_id: int, parts: list[Buffer], timeout_s: float | None) -> PendingResponse[R]:
        if self._closed is not None:
            error = ClientClosedError if isinstance(self._closed, ClientClosedError) else BookieConnectionError
            raise error(f"connection to bookie {self.address} is closed: {self._closed}")
        now = anyio.current_time()
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        deadline = now + timeout_s
        pending = PendingResponse(kind, deadline, parts, now, timeout_s)
        self._pending[request_id] = pending
        deadlines = self._deadlines
        if not deadlines or deadline < deadlines[0][0]:
            self._earlier_deadline.set()
        heapq.heappush(deadlines, (deadline, request_id))
        if len(deadlines) > 2 * len(self._pending) + 1024:
            # Mostly answered requests: rebuild from those still in flight (bounded memory).
            self._deadlines = [(pr.deadline, rid) for rid, pr in self._pending.items()]
            heapq.heapify(self._deadlines)
        self._enqueue(parts)
        return pending

    def _enqueue(self, parts: list[Buffer]) -> None:
        if self._send_direct(parts):
            return
        self._queued += 1
        outgoing = self._outgoing
        outgoing.extend(parts)
        for part in parts:
            self._outgoing_size += len(part)
        if self._outgoing_size >= TARGET_FRAME_SIZE:
            self._cuts.append(len(outgoing))
            self._outgoing_size = 0
        self._wake_sender.set()

    def _send_direct(self, parts: list[Buffer]) -> bool:
        """Send a request from the submitting task, not a pass later from the send loop: when
        the loop holds nothing (the frame keeps its place on the wire) and at most one earlier
        request is unanswered (more: a pipeline, whose requests share the loop's frames, as
        Nagle's rule). False: nothing was sent, queue it."""
        if self._send_now is None or len(self._pending) > 2 or self._outgoing or self._sending or self._rest is not None:
            return False
        frame = pack_frame(parts)
        sent = self._send_now(frame)
        if sent == 0:
            return False  # the send loop tries, and reports a failure
        if sent < len(frame):
            self._rest = memoryview(frame)[sent:]
            self._wake_sender.set()
        return True

    def _try_again(self, request_id: int, pending: PendingResponse[Any]) -> bool:
        """A TRY_AGAIN answer: schedule the request to be sent again (True), unless its
        ``try_again_s`` is spent (False: the caller gets the answer)."""
        resend_at = anyio.current_time() + TRY_AGAIN_BACKOFF_S
        if pending.parts is None or resend_at >= pending.submitted + self.try_again_s:
            return False
        self.tries_again += 1
        if self._on_try_again is not None:
            self._on_try_again()
        self._pending[request_id] = pending
        # A fresh timeout for the new try (the timeout loop skips the old heap entry).
        pending.deadline = resend_at + pending.timeout_s
        heapq.heappush(self._deadlines, (pending.deadline, request_id))
        self._resends.append((resend_at, request_id, pending))
        self._resend_wake.set()
        return True

    def submit(
        self, operation: Operation[Any, R], encode: Callable[[int], Buffer | list[Buffer]], *, timeout_s: float | None = None
    ) -> PendingResponse[R]:
        """Any operation of :mod:`bkframe.proto.table`: ``encode(request_id)`` is its message
        (its module's encoder), the answer comes as the operation's response class. A new
        operation is sent this way without a method of its own here; the methods below are
        the common ones with their arguments spelled out."""
        rid = next(self._ids)
        message = encode(rid)
        return self._submit(operation.response, rid, message if isinstance(message, list) else [message], timeout_s)

    def submit_add(
        self,
        ledger_id: int,
        entry_id: int,
        data: Buffer,
        *,
        master_key: bytes,
        lac: int = -1,
        ledger_type: int = 0,
        recovery: bool = False,
        timeout_s: float | None = None,
    ) -> PendingResponse[AddResponse]:
        """ADD: one entry (recovery writes entries back with it, one at a time; writers send
        ADD_BATCH)."""
        rid = next(self._ids)
        parts = encode_add(rid, ledger_id, entry_id, lac, ledger_type, master_key, data, recovery=recovery)
        return self._submit(table.ADD.response, rid, parts, timeout_s)

    def submit_add_batch(
        self,
        ledger_id: int,
        entry_ids: list[int],
        entries: list[Buffer],
        *,
        master_key: bytes,
        lac: int = -1,
        ledger_type: int = 0,
        recovery: bool = False,
        timeout_s: float | None = None,
    ) -> PendingResponse[AddBatchResponse]:
        """Many entries of one ledger in one ADD_BATCH message; one status for all."""
        rid = next(self._ids)
        parts = encode_add_batch(rid, ledger_id, lac, ledger_type, master_key, entry_ids, entries, recovery=recovery)
        return self._submit(table.ADD_BATCH.response, rid, parts, timeout_s)

    def submit_sync(self, ledger_id: int, *, timeout_s: float | None = None) -> PendingResponse[SyncResponse]:
        """SYNC (BP-14 force): the bookie fsyncs what it holds of the ledger; answers LastAddSynced."""
        rid = next(self._ids)
        return self._submit(table.SYNC.response, rid, [encode_sync(rid, ledger_id)], timeout_s)

    def submit_read(
        self, ledger_id: int, entry_id: int, *, master_key: bytes = b"", fence: bool = False, timeout_s: float | None = None
    ) -> PendingResponse[ReadResponse]:
        rid = next(self._ids)
        message = encode_read(rid, ledger_id, entry_id, master_key=master_key, fence=fence)
        return self._submit(table.READ.response, rid, [message], timeout_s)

    def submit_read_batch(
        self,
        ledger_id: int,
        first: int,
        last: int,
        *,
        step: int = 1,
        max_bytes: int = TARGET_FRAME_SIZE,
        master_key: bytes = b"",
        timeout_s: float | None = None,
    ) -> PendingResponse[ReadBatchResponse]:
        """READ_BATCH: the entries the bookie holds from ``first`` on (see bookie/reads.py)."""
        rid = next(self._ids)
        message = encode_read_batch(rid, ledger_id, first, last, max_bytes, step, master_key=master_key)
        return self._submit(table.READ_BATCH.response, rid, [message], timeout_s)

    def submit_read_lac(
        self, ledger_id: int, *, previous_lac: int | None = None, timeout_ms: int = 0, timeout_s: float | None = None
    ) -> PendingResponse[ReadLacResponse]:
        """READ_LAC; with ``previous_lac`` a long poll answered once the LAC passes it (the
        request's own ``timeout_s`` must then cover ``timeout_ms``)."""
        rid = next(self._ids)
        message = encode_read_lac(rid, ledger_id, previous_lac=previous_lac, timeout_ms=timeout_ms)
        return self._submit(table.READ_LAC.response, rid, [message], timeout_s)

    def submit_write_lac(
        self, ledger_id: int, lac: int, *, master_key: bytes, timeout_s: float | None = None
    ) -> PendingResponse[WriteLacResponse]:
        """WRITE_LAC: an explicit LAC, answered once the bookie journaled and synced it."""
        rid = next(self._ids)
        return self._submit(table.WRITE_LAC.response, rid, [encode_write_lac(rid, ledger_id, lac, master_key)], timeout_s)

    def submit_write_close(
        self, ledger_id: int, *, master_key: bytes, timeout_s: float | None = None
    ) -> PendingResponse[WriteCloseResponse]:
        """WRITE_CLOSE (BP-32): advisory; the writer is done with the ledger."""
        rid = next(self._ids)
        return self._submit(table.WRITE_CLOSE.response, rid, [encode_write_close(rid, ledger_id, master_key)], timeout_s)

    def submit_list_entries(
        self, ledger_id: int, first: int, last: int, *, timeout_s: float | None = None
    ) -> PendingResponse[ListEntriesResponse]:
        """LIST_ENTRIES: the runs of entries of ``first..last`` the bookie holds (one answer
        covers at most ``MAX_LIST_SPAN`` ids; ``next_first`` says where to go on)."""
        rid = next(self._ids)
        return self._submit(table.LIST_ENTRIES.response, rid, [encode_list_entries(rid, ledger_id, first, last)], timeout_s)

    async def add(self, ledger_id: int, entry_id: int, data: Buffer, **kw: Any) -> AddResponse:
        return await self.submit_add(ledger_id, entry_id, data, **kw).wait()

    async def read(self, ledger_id: int, entry_id: int, **kw: Any) -> ReadResponse:
        return await self.submit_read(ledger_id, entry_id, **kw).wait()

    async def read_lac(self, ledger_id: int, **kw: Any) -> ReadLacResponse:
        return await self.submit_read_lac(ledger_id, **kw).wait()

    async def info(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        response = await self.submit(table.GET_BOOKIE_INFO, encode_bookie_info, timeout_s=timeout_s).wait()
        if response.info is None:
            raise BookieConnectionError(f"bookie {self.address} did not say what it is: {response.message}")
        return response.info

    # -- background tasks ----------------------------------------------------------------

    async def _send_loop(self) -> None:
        while True:
            await self._wake_sender.wait()
            self._wake_sender = anyio.Event()
            self._sending = True  # (nothing goes directly meanwhile: it would overtake these)
            try:
                if self._rest is not None:  # the tail of a frame sent directly goes first
                    await self._stream.send(bytes(self._rest))  # (a copy, but rare: the socket was full)
                    self._rest = None
                # Let tasks that are ready submit more first, so that pipelined requests share
                # frames (and the bookie's journal records) instead of going one per frame.
                # Only while earlier requests are on the wire, though (as Nagle's rule): with
                # none, the bookie is idle and a pass spent waiting is latency of a lone request.
                before = -1 if len(self._pending) > self._queued else len(self._outgoing)
                while before != len(self._outgoing) and not self._cuts:
                    before = len(self._outgoing)
                    await anyio.lowlevel.checkpoint()
                parts, self._outgoing = self._outgoing, []
                self._queued = 0
                cuts, self._cuts = self._cuts, []
                self._outgoing_size = 0 if not cuts or cuts[-1] == len(parts) else sum(map(len, parts[cuts[-1] :]))
                start = 0
                for cut in [*cuts, len(parts)]:
                    if cut > start:
                        await self._send_frame(parts[start:cut])
                    start = cut
            finally:
                self._sending = False

    async def _send_frame(self, parts: list[Buffer]) -> None:
        """One frame of ``parts``: from the parts themselves where their average is large
        (entries of a few KiB and more), else joined first (many small parts: one copy is
        cheaper than a ``writev`` entry and a view each)."""
        size = sum(map(len, parts))
        if self._send_scattered is None or size < SCATTER_PART_BYTES * len(parts):
            await self._stream.send(pack_frame(parts))
            return
        try:
            await self._send_scattered([FRAME_HEADER.pack(size), *parts])
        except OSError as e:
            raise BookieConnectionError(f"sending to bookie {self.address} failed: {e}") from None

    async def _resend_loop(self) -> None:
        """Send again, after their backoff, the requests answered TRY_AGAIN."""
        resends = self._resends
        while True:
            while not resends:
                await self._resend_wake.wait()
                self._resend_wake = anyio.Event()
            when, request_id, pending = resends[0]
            await anyio.sleep_until(when)
            resends.popleft()
            if self._pending.get(request_id) is pending and self._closed is None and pending.parts is not None:
                self._enqueue(pending.parts)  # (not if it timed out or failed meanwhile)

    async def _timeout_loop(self) -> None:
        """Fail each request whose deadline passed (the bookie may be hung: SIGSTOP, a
        stalled disk, a partition); its late answer, if any, is dropped."""
        while True:
            deadlines, pending_by_id = self._deadlines, self._pending
            # Entries of requests answered (or given a later deadline) since are dropped now,
            # not at their deadline: the loop sleeps until the oldest request still waiting
            # is due, so a steady stream of answered requests wakes it about once a timeout,
            # not once a request (each wake a pass of the loop and a cancel scope's expiry).
            while deadlines:
                deadline, rid = deadlines[0]
                pending = pending_by_id.get(rid)
                if pending is not None and pending.deadline <= deadline:
                    break
                heapq.heappop(deadlines)
            if not deadlines:
                await self._earlier_deadline.wait()
                self._earlier_deadline = anyio.Event()
                continue
            deadline, rid = deadlines[0]
            if deadline > anyio.current_time():
                with anyio.CancelScope(deadline=deadline):
                    await self._earlier_deadline.wait()
                if self._earlier_deadline.is_set():
                    self._earlier_deadline = anyio.Event()
                continue
            heapq.heappop(deadlines)
            pending = self._pending.get(rid)
            if pending is not None and pending.deadline <= deadline:
                del self._pending[rid]
                pending._fail(BookieTimeoutError(f"bookie {self.address} did not answer request {rid} in time"))

    async def _receive_loop(self) -> None:
        frames = FrameBuffer()
        receive = readable_receiver(self._stream) or self._stream.receive
        pending_by_id = self._pending
        while True:
            while (body := frames.next_frame()) is not None:
                for response in decode_responses(body):
                    rid = response.request_id
                    pending = pending_by_id.pop(rid, None)
                    if pending is not None:
                        if response.status == Status.TRY_AGAIN and self._try_again(rid, pending):
                            continue
                        pending._set(response)
                    elif rid == 0 and response.status == Status.BAD_REQUEST:
                        raise BookieConnectionError(f"bookie {self.address} rejected the stream: {response.message}")
            try:
                data = await receive(RECEIVE_SIZE)
            except anyio.EndOfStream:
                data = b""
            if not data:
                raise BookieConnectionError(f"bookie {self.address} closed the connection")
            frames.feed(data)

    def _fail_all(self, error: BaseException) -> None:
        if self._closed is None:
            self._closed = error
        self._closed_event.set()
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            waiter._fail(error)


#: What a client sends in its AUTH request without a token: "nobody in particular".
NO_AUTH: tuple[str, bytes] = ("none", b"")


async def _secure(tcp: anyio.abc.SocketStream, address: str, host: str, ssl_context: ssl.SSLContext) -> TLSStream:
    try:
        return await TLSStream.wrap(tcp, hostname=host, ssl_context=ssl_context)
    except (anyio.BrokenResourceError, anyio.EndOfStream, ssl.SSLError) as e:
        cause = e.__cause__ or e
        hint = (
            "the bookie's certificate is not signed by the CA given (tls_ca) or does not name this address"
            if isinstance(cause, ssl.SSLCertVerificationError)
            else "does the bookie serve TLS? ([tls] enabled = true; a plaintext bookie closes TLS connections)"
        )
        raise BookieConnectionError(f"TLS handshake with bookie {address} failed ({cause}): {hint}") from None


async def _authenticate(stream: anyio.abc.ByteStream, address: str, auth: tuple[str, bytes], tls: bool, features: int) -> int:
    """Send the connection's AUTH request, with FEATURES after it in its frame (unless
    ``features`` is 0), and read their answers (nothing else is in flight); return the
    features the bookie uses. A bookie older than FEATURES answers it BAD_REQUEST (an
    unknown op), and uses none."""
    method, credential = auth
    messages = [encode_auth(0, method, credential)]
    if features:
        messages.append(encode_features(0, features))
    try:
        await stream.send(pack_frame(messages))
        frames = FrameBuffer()
        answers: list[Response] = []
        # All answered, or AUTH refused (then nothing after it is).
        while not answers or (answers[0].status == Status.OK and len(answers) < len(messages)):
            body = frames.next_frame()
            if body is not None:
                answers += decode_responses(body)
                continue
            try:
                frames.feed(await stream.receive(64 * 1024))
            except anyio.EndOfStream:
                raise BookieConnectionError("it closed the connection") from None
        response = answers[0]
    except (anyio.BrokenResourceError, BookieConnectionError, ProtocolError, OSError, IndexError) as e:
        cause = e.__cause__ or e
        hint = (
            "does it require a client certificate? (give tls_cert and tls_key)" if tls else "does it require TLS? (give tls_ca)"
        )
        raise BookieConnectionError(f"bookie {address} refused the connection ({cause}): {hint}") from None
    if response.status == Status.UNAUTHORIZED:
        raise UnauthorizedError(
            f"bookie {address} refused authentication: {response.message}. Give the client a token the bookie "
            "accepts (open_client(..., auth_token=...), --auth-token-file) or the certificate it requires"
        )
    if response.status != Status.OK or not isinstance(response, AuthResponse):
        raise BookieConnectionError(f"bookie {address} refused the connection: {response.message or response.status.name}")
    return next((a.features for a in answers[1:] if isinstance(a, FeaturesResponse)), 0)


@asynccontextmanager
async def connect_bookie(
    host: str,
    port: int,
    *,
    connect_timeout_s: float = 10.0,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ssl_context: ssl.SSLContext | None = None,
    auth: tuple[str, bytes] = NO_AUTH,
    try_again_s: float = DEFAULT_TRY_AGAIN_S,
    on_try_again: Callable[[], None] | None = None,
    features: int = Feature.TRY_AGAIN,
    asyncio_transport: bool = True,
) -> AsyncIterator[BookieClient]:
    """Connect to a bookie; the connection lives for the ``async with`` block.

    With ``ssl_context`` the connection is TLS; every connection starts with an AUTH request
    carrying ``auth`` (method, credential), answered before anything else, so a refusal --
    wrong token, missing certificate, plaintext against TLS or the reverse -- is an error
    here (:class:`~bkframe.errors.UnauthorizedError` or :class:`BookieConnectionError`
    saying what to change), never a hang.

    A broken connection fails every pending response with :class:`BookieConnectionError`
    (and later submissions raise it); the block itself goes on, so the caller sees the
    failure where it waits, and :meth:`BookieClient.wait_closed` returns. An unanswered
    request fails with :class:`BookieTimeoutError` after its timeout (``request_timeout_s``
    unless the request gives its own).

    ``features`` (:class:`~bkframe.proto.Feature` bits) are sent in a FEATURES request after
    the AUTH; 0 sends none (a client of protocol version 1 exactly: the bookie then never
    answers TRY_AGAIN). A TRY_AGAIN answer is retried for ``try_again_s`` (see the module
    docstring), each retry reported to ``on_try_again``. ``asyncio_transport``: see
    :attr:`~bkframe.client.settings.ClientSettings.asyncio_transport`.
    """
    address = f"{host}:{port}"
    stream, used = await _open_stream(
        host, port, connect_timeout_s=connect_timeout_s, ssl_context=ssl_context, auth=auth, features=features,
        asyncio_transport=asyncio_transport,
    )
    client = BookieClient(
        stream, address, request_timeout_s=request_timeout_s, try_again_s=try_again_s, on_try_again=on_try_again
    )
    client.features = used
    try:
        async with _connection_tasks(client, address):
            yield client
    finally:
        await _close_stream(stream)


async def _open_stream(
    host: str,
    port: int,
    *,
    connect_timeout_s: float,
    ssl_context: ssl.SSLContext | None,
    auth: tuple[str, bytes],
    features: int,
    asyncio_transport: bool,
) -> tuple[anyio.abc.ByteStream, int]:
    """The stream to the bookie, connected and authenticated, and the feature bits it uses;
    a failure closes it and raises a :class:`~bkframe.errors.BKError` saying what to change."""
    address = f"{host}:{port}"
    stream: anyio.abc.ByteStream | None = None
    try:
        with anyio.fail_after(connect_timeout_s):
            if ssl_context is None and asyncio_transport and sniffio.current_async_library() == "asyncio":
                stream = await connect_asyncio(host, port)  # (asyncio's transport, as it is: see the module)
            else:
                tcp = await anyio.connect_tcp(host, port)
                stream = tcp
                if ssl_context is not None:
                    stream = await _secure(tcp, address, host, ssl_context)
            used = await _authenticate(stream, address, auth, ssl_context is not None, features)
    except OSError as e:
        await _close(stream)
        raise BookieConnectionError(f"cannot connect to bookie {address}: {e}") from e
    except TimeoutError:
        await _close(stream)
        hint = "" if stream is None else " (hung, or a TLS mismatch: give tls_ca only for bookies with [tls] enabled)"
        raise BookieTimeoutError(f"cannot connect to bookie {address}: no answer in {connect_timeout_s} s{hint}") from None
    except BKError:
        await _close(stream)
        raise
    assert stream is not None
    return stream, used


@asynccontextmanager
async def _connection_tasks(client: BookieClient, address: str) -> AsyncIterator[None]:
    """The connection's own tasks (send, receive, timeouts, resends) for the block; a failure
    ends them all and fails every pending request, never the caller's block."""
    scopes: list[anyio.CancelScope] = []

    async def run(task: Any) -> None:
        try:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                await task()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, ProtocolError, BookieConnectionError) as e:
            err = e if isinstance(e, BookieConnectionError) else BookieConnectionError(f"bookie {address}: {e!r}")
            client._fail_all(err)
            for other in scopes:
                other.cancel()

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(run, client._send_loop)
        nursery.start_soon(run, client._receive_loop)
        nursery.start_soon(run, client._timeout_loop)
        nursery.start_soon(run, client._resend_loop)
        try:
            yield
        finally:
            client._fail_all(ClientClosedError(f"connection to bookie {address} was closed by the client"))
            nursery.cancel_scope.cancel()


async def _close_stream(stream: anyio.abc.ByteStream) -> None:
    """Close the stream once the connection's tasks have ended: TLS's close reads the bookie's
    close_notify, which the receive loop must not be reading at the same time."""
    # Shielded: an unshielded await here would raise Cancelled (when the caller is
    # cancelled) and replace whatever the body raised.
    with anyio.CancelScope(shield=True):
        # TLS sends close_notify first: bounded, so a hung bookie cannot hold us.
        with anyio.move_on_after(1.0):
            try:
                await stream.aclose()
            except (OSError, anyio.BrokenResourceError):
                pass  # (ssl.SSLError is one) a close that fails has closed all the same
        await anyio.aclose_forcefully(stream)


async def _close(stream: anyio.abc.ByteStream | None) -> None:
    if stream is not None:
        with anyio.CancelScope(shield=True):
            await anyio.aclose_forcefully(stream)
