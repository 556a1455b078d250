"""Connections to bookies by bookie id, opened on demand and reopened after a failure; the
registered bookies (:mod:`bkframe.client.bookies.listing`) they are found in.

A connect runs as a task of the client, never of the caller that asked for it: a quorum
decision that no longer needs a hung bookie stops waiting for it (:mod:`bkframe.client.quorum`) while its
connect goes on, bounded by ``connect_timeout_s``, and is ready for later requests."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Protocol

import anyio

from bkframe.client.bookies.connection import DEFAULT_TRY_AGAIN_S, NO_AUTH, BookieClient, R, connect_bookie
from bkframe.client.bookies.errors import BookieConnectionError, BookieTimeoutError, ClientClosedError
from bkframe.client.bookies.health import BookieHealth
from bkframe.client.bookies.listing import BookieSet
from bkframe.client.bookies.pending_response import PendingResponse
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.interfaces.placement import PlacementPolicy
from bkframe.errors import BKError
from bkframe.proto.ops.add_batch import AddBatchResponse


class InProcessBookie(Protocol):
    """A bookie in the client's own process that takes the client's adds without a socket
    (a bookie's own subscription owners append their state ledgers to it: docs/subscriptions.md).
    It serves them as it serves a connection's, with the same answers."""

    @property
    def taking_adds(self) -> bool:
        """Whether it takes adds now (serving, not stopping): else they go by the connection."""
        ...

    def submit_add_batch(
        self, ledger_id: int, entry_ids: list[int], entries: list[Buffer], *, master_key: bytes, lac: int = -1,
        ledger_type: int = 0, recovery: bool = False, timeout_s: float | None = None,
    ) -> PendingResponse[AddBatchResponse]:
        """As :meth:`BookieClient.submit_add_batch <bkframe.client.bookies.connection.BookieClient.submit_add_batch>`."""
        ...


class BookiePool:
    """Holds one connection per bookie inside the client's nursery.

    A failed connect quarantines the bookie in ``health`` (see :mod:`bkframe.client.bookies.health`).
    It carries the client's placement policy and its view of the registered bookies
    (``bookies``), which choosing bookies needs with it.
    """

    def __init__(
        self,
        nursery: anyio.abc.TaskGroup,
        metadata: MetadataStore,
        *,
        connect_timeout_s: float = 10.0,
        asyncio_transport: bool = True,
        health: BookieHealth | None = None,
        placement: PlacementPolicy,
        ssl_context: ssl.SSLContext | None = None,
        auth: tuple[str, bytes] = NO_AUTH,
        bookie_set_max_age_s: float = 2.0,
        try_again_s: float = DEFAULT_TRY_AGAIN_S,
        on_try_again: Callable[[], None] | None = None,
    ) -> None:
        self._nursery = nursery
        #: The registered bookies, listed at most ``bookie_set_max_age_s`` ago.
        self.bookies = BookieSet(metadata, nursery, bookie_set_max_age_s)
        self.connect_timeout_s = connect_timeout_s
        self._asyncio_transport = asyncio_transport
        self.health = health if health is not None else BookieHealth(0.0)
        #: How ensembles and replacements are chosen (see :mod:`bkframe.client.placement`): it travels
        #: with the pool, as health does, so every caller of ``choose_*`` uses the client's.
        self.placement = placement
        #: Ledgers each bookie holds, as it last reported (GET_BOOKIE_INFO), with when
        #: (event-loop time) and how many this client placed on it since: for ``least_used``.
        self.ledger_counts: dict[str, tuple[int, float]] = {}
        #: Bookies whose ledger count is being asked for in the background.
        self.asking_counts: set[str] = set()
        self._clients: dict[str, BookieClient] = {}
        #: Bookies in this process, by id: writers' adds to them skip the socket (:meth:`adds_to`).
        self.in_process: dict[str, InProcessBookie] = {}
        self._addresses: dict[str, str] = {}
        #: Connects under way, by bookie id (see :meth:`get`).
        self._attempts: dict[str, _Attempt] = {}
        #: TLS (None: plaintext) and the AUTH request of every connection (see connect_bookie).
        self._ssl_context = ssl_context
        self._auth = auth
        #: TRY_AGAIN answers: how long a request is sent again, and who counts the tries.
        self._try_again_s = try_again_s
        self._on_try_again = on_try_again

    @property
    def auth(self) -> tuple[str, bytes]:
        """The AUTH request's (method, credential) every connection sends first."""
        return self._auth

    @property
    def tls(self) -> bool:
        """The connections are TLS."""
        return self._ssl_context is not None

    @property
    def nursery(self) -> anyio.abc.TaskGroup:
        """The client's nursery: connections, and what placement asks in the background."""
        return self._nursery

    async def resolve(self, bookie_id: str, *, refresh: bool = False) -> str:
        """The bookie's address: as last known, else (or with ``refresh``) as registered."""
        if refresh or bookie_id not in self._addresses:
            view = await self.bookies.view(fresh=refresh)
            if bookie_id not in view.addresses and not refresh:
                view = await self.bookies.view(fresh=True)  # registered since the view was read?
            self._addresses.update(view.addresses)
        try:
            return self._addresses[bookie_id]
        except KeyError:
            raise BookieConnectionError(f"bookie {bookie_id} is not registered (not running?)") from None

    def connected(self, bookie_id: str) -> BookieClient | None:
        client = self._clients.get(bookie_id)
        return client if client is not None and not client.closed else None

    def adds_to(self, bookie_id: str) -> BookieClient | InProcessBookie | None:
        """Where a writer sends its adds to ``bookie_id``: the bookie itself when it runs in
        this process and takes them, else its connection (None: not connected)."""
        local = self.in_process.get(bookie_id)
        if local is not None and local.taking_adds:
            return local
        return self.connected(bookie_id)

    async def get(self, bookie_id: str) -> BookieClient:
        """The connection to ``bookie_id``, opened if need be.

        The connect runs in the client's nursery, not in the caller: a caller that stops
        waiting (a quorum decided without this bookie, a deadline) leaves it going, so a
        slow or hung bookie is connected later without anyone waiting for it, and every
        caller meanwhile waits for that one attempt instead of starting one each. A failed
        attempt fails all of them; the next ``get`` tries again.
        """
        client = self.connected(bookie_id)
        if client is not None:
            return client
        attempt = self._attempts.get(bookie_id)
        if attempt is None:
            attempt = self._attempts[bookie_id] = _Attempt()
            self._nursery.start_soon(self._connect, bookie_id, attempt)
        return await attempt.wait()

    def request(
        self, bookie_id: str, submit: Callable[[BookieClient], PendingResponse[R]], kind: type[R], *, timeout_s: float
    ) -> PendingResponse[R]:
        """``submit(connection)`` now if the bookie is connected; else a response that
        comes once it is and the request is answered, or fails after ``timeout_s`` (the
        connect goes on): a read then waits for a hung bookie's connect no longer than for
        its answer, so speculation and failover work on a fresh client too."""
        client = self.connected(bookie_id)
        if client is not None:
            return submit(client)
        relay = PendingResponse(kind, anyio.current_time() + timeout_s)
        self._nursery.start_soon(self._relay, bookie_id, submit, relay)
        return relay

    async def _relay(
        self, bookie_id: str, submit: Callable[[BookieClient], PendingResponse[R]], relay: PendingResponse[R]
    ) -> None:
        try:
            with anyio.CancelScope(deadline=relay.deadline):
                try:
                    response = await submit(await self.get(bookie_id)).wait()
                except (ConnectionError, BKError) as e:
                    relay.complete(None, e)
                    return
                relay.complete(response)
                return
            relay.complete(None, BookieTimeoutError(f"bookie {bookie_id} was not connected and answered in time"))
        finally:
            # Cancelled with the client: whoever still waits hears why.
            relay.complete(None, ClientClosedError(f"the client closed before bookie {bookie_id} answered"))

    async def _connect(self, bookie_id: str, attempt: _Attempt) -> None:
        try:
            refreshed = bookie_id in self._clients
            address = await self.resolve(bookie_id, refresh=refreshed)
            while True:
                host, _, port = address.rpartition(":")
                try:
                    client = await self._nursery.start(self._hold, bookie_id, host, int(port))
                except ConnectionError as e:
                    # A restarted bookie listens elsewhere: the address may be stale (it
                    # came with another bookie's lookup). Look it up afresh, once.
                    self._addresses.pop(bookie_id, None)
                    if not refreshed:
                        refreshed = True
                        try:
                            fresh = await self.resolve(bookie_id, refresh=True)
                        except ConnectionError:
                            fresh = address
                        if fresh != address:
                            address = fresh
                            continue
                    self.health.failed(bookie_id, str(e))
                    raise
                attempt.succeeded(client)
                return
        except Exception as e:  # noqa: BLE001 - handed to every waiting caller, raised there
            attempt.failed(e)
        finally:
            # Cancelled with the client: nobody is left to connect for.
            attempt.failed(ClientClosedError(f"the client closed before bookie {bookie_id} was connected"))
            if self._attempts.get(bookie_id) is attempt:
                del self._attempts[bookie_id]

    async def _hold(self, bookie_id: str, host: str, port: int, *, task_status: anyio.abc.TaskStatus[BookieClient]) -> None:
        # A failed connect raises out of nursery.start to _connect.
        async with connect_bookie(
            host,
            port,
            connect_timeout_s=self.connect_timeout_s,
            asyncio_transport=self._asyncio_transport,
            ssl_context=self._ssl_context,
            auth=self._auth,
            try_again_s=self._try_again_s,
            on_try_again=self._on_try_again,
        ) as client:
            self._clients[bookie_id] = client
            task_status.started(client)
            await client.wait_closed()


class _Attempt:
    """One connect to a bookie under way, which any number of callers wait for."""

    def __init__(self) -> None:
        self._done = anyio.Event()
        self._client: BookieClient | None = None
        self._error: Exception | None = None

    def succeeded(self, client: BookieClient) -> None:
        if not self._done.is_set():
            self._client = client
            self._done.set()

    def failed(self, error: Exception) -> None:
        if not self._done.is_set():
            self._error = error
            self._done.set()

    async def wait(self) -> BookieClient:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._client is not None
        return self._client
