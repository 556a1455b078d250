"""The admin HTTP service of a bookie: BookKeeper's admin API, Prometheus metrics, and the
cluster status page, served by hypercorn's trio worker inside the bookie's nursery.

Starlette is the framework (routing, requests, responses) and hypercorn the server: both
run on trio (starlette through anyio), so the service shares the bookie's event loop and
sees its state directly, with no thread and no lock. See docs/admin.md for the endpoints.
"""

from __future__ import annotations

import heapq
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bkframe.admin.metrics import bookie_registry
from bkframe.admin.status import StatusPage
from bkframe.bookie.bookie import Bookie
from bkframe.bookie.service import BookieService
from bkframe.client.client import Client, open_client
from bkframe.core.interfaces.auth import AuthenticationError, AuthProvider, Peer
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import LEDGER_PAGE
from bkframe.errors import MetadataError, NoSuchLedgerError

log = logging.getLogger("bkframe.admin")

#: How long an admin request may wait for the metadata store.
STORE_TIMEOUT_S = 5.0
#: Ledger ids per page of /api/v1/ledger/list, by default and at most.
LIST_LIMIT = 1000
MAX_LIST_LIMIT = LEDGER_PAGE
#: Config keys whose values never leave the bookie (server_config shows "***").
SECRET_KEY = re.compile(r"pass|secret|token|key|credential", re.IGNORECASE)

#: ``await authorize(request)``: None lets the request through, a string refuses it (401)
#: with that reason. The seam for the auth provider hook (issue 16): off by default.
Authorize = Callable[[Request], Awaitable[str | None]]


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def redact(value: Any) -> Any:
    """A config section as JSON, secrets masked."""
    if isinstance(value, dict):
        return {k: "***" if SECRET_KEY.search(k) and v else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def provider_authorize(provider: AuthProvider) -> Authorize:
    """Admin requests checked by the bookie's auth provider, as its connections are: the
    ``Authorization: METHOD CREDENTIAL`` header stands for the AUTH request. /heartbeat stays
    open (load balancers and liveness probes carry no credential)."""

    async def authorize(request: Request) -> str | None:
        if request.url.path == "/heartbeat":
            return None
        method, _, credential = request.headers.get("authorization", "").strip().partition(" ")
        method = "token" if method.lower() == "bearer" else method.lower()
        client = request.client
        peer = Peer(address=f"{client.host}:{client.port}" if client else "")
        try:
            provider.authenticate(peer, method, credential.strip().encode())
        except AuthenticationError as e:
            return f"{e}; send the credential as 'Authorization: Bearer TOKEN' (docs/admin.md)"
        return None

    return authorize


class AdminServer:
    """``AdminServer(service)``: ``await nursery.start(admin.run)`` returns the URL it serves on.

    ``authorize`` checks every request; without one, ``[http] require_auth`` makes it the
    bookie's ``[auth]`` provider (:func:`provider_authorize`)."""

    def __init__(self, service: BookieService, *, authorize: Authorize | None = None) -> None:
        self.service = service
        if authorize is None and service.config.http.require_auth and service.bookie is not None:
            authorize = provider_authorize(service.bookie.auth)
        self.authorize = authorize
        self.registry = bookie_registry(service)
        self.client: Client | None = None
        self.status = StatusPage(self)
        routes = [
            Route("/", self.status.render),
            Route("/heartbeat", self.heartbeat),
            Route("/metrics", self.metrics),
            Route("/api/v1/bookie/info", self.bookie_info),
            Route("/api/v1/bookie/state", self.bookie_state),
            Route("/api/v1/bookie/gc", self.gc, methods=["GET", "POST", "PUT"]),
            Route("/api/v1/ledger/list", self.ledger_list),
            Route("/api/v1/ledger/metadata", self.ledger_metadata),
            Route("/api/v1/config/server_config", self.server_config),
        ]
        self.app = Starlette(routes=routes)
        self.app.add_middleware(_AuthMiddleware, admin=self)  # type: ignore[arg-type]

    @property
    def bookie(self) -> Bookie:
        assert self.service.bookie is not None  # the service starts us once it exists
        return self.service.bookie

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        http = self.service.config.http
        config = HypercornConfig()
        config.bind = [f"{http.host}:{http.port}"]
        config.accesslog = None  # the bookie's log is for the bookie
        config.errorlog = log
        metadata = self.service.config.bookie.metadata
        async with trio.open_nursery() as nursery:
            if metadata:
                # The status page asks every bookie for its info through a client of its own.
                self.client = await nursery.start(self._client, metadata)
            binds = await nursery.start(serve, self.app, config)
            url = binds[0]
            log.info("admin http on %s", url)
            task_status.started(url)

    async def _client(self, metadata: str, *, task_status: trio.TaskStatus[Client] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_client(metadata, plugins=self.service.plugins) as client:
            task_status.started(client)
            await trio.sleep_forever()

    def store(self) -> MetadataStore | None:
        return self.service.store

    # -- endpoints ------------------------------------------------------------------------

    async def heartbeat(self, request: Request) -> Response:
        return PlainTextResponse("OK\n")

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def bookie_info(self, request: Request) -> Response:
        return JSONResponse(self.bookie.info())

    async def bookie_state(self, request: Request) -> Response:
        bookie = self.bookie
        store = self.store()
        decommissioned = False
        if store is not None:
            try:
                with trio.fail_after(STORE_TIMEOUT_S):
                    decommissioned = bookie.bookie_id in await store.list_decommissioned()
            except (trio.TooSlowError, MetadataError) as e:
                return error(503, f"the metadata store did not answer: {e!r}")
        state = "draining" if decommissioned else "read-only" if bookie.read_only else "writable"
        return JSONResponse({
            "bookie_id": bookie.bookie_id,
            # What clients and other bookies connect to ([bookie] advertised_address).
            "address": str(self.service.advertised) if self.service.advertised is not None else "",
            "state": state,
            "read_only": bookie.read_only,
            "read_only_reason": bookie.mode.reason,
            "decommissioned": decommissioned,
        })

    async def gc(self, request: Request) -> Response:
        if self.service.gc is None:
            return error(503, "garbage collection needs a metadata store; this bookie has none")
        if request.method == "GET":
            c = self.bookie.counters
            return JSONResponse({"gc_ledgers_deleted": c.gc_ledgers_deleted, "gc_bytes_freed": c.gc_bytes_freed})
        deleted, freed = await self.service.gc.collect()
        return JSONResponse({"ledgers_deleted": deleted, "bytes_freed": freed})

    async def ledger_list(self, request: Request) -> Response:
        store = self.store()
        if store is None:
            return error(503, "this bookie has no metadata store")
        try:
            start = _query_int(request, "start", 0, 0, None)
            limit = _query_int(request, "limit", LIST_LIMIT, 1, MAX_LIST_LIMIT)
        except ValueError as e:
            return error(400, str(e))
        try:
            with trio.fail_after(STORE_TIMEOUT_S):
                stored = await store.list_ledgers(start=start, limit=limit)
        except (trio.TooSlowError, MetadataError) as e:
            return error(503, f"the metadata store did not answer: {e!r}")
        held = heapq.nsmallest(limit, (i for i in self.bookie.storage.ledgers() if i >= start))
        ledgers, here, after = ledger_page(stored, held, limit)
        return JSONResponse({"ledgers": ledgers, "on_this_bookie": here, "next": after})

    async def ledger_metadata(self, request: Request) -> Response:
        store = self.store()
        if store is None:
            return error(503, "this bookie has no metadata store")
        raw = request.query_params.get("ledger_id")
        if raw is None:
            return error(400, "missing query parameter ledger_id (e.g. /api/v1/ledger/metadata?ledger_id=1)")
        try:
            ledger_id = int(raw)
            if ledger_id < 0:
                raise ValueError
        except ValueError:
            return error(400, f"ledger_id={raw!r} is not a ledger id (a non-negative integer)")
        try:
            with trio.fail_after(STORE_TIMEOUT_S):
                md = await store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            return error(404, f"no ledger {ledger_id} in the metadata store")
        return JSONResponse(md.to_public_json())  # the password's hash never leaves the store

    async def server_config(self, request: Request) -> Response:
        config = self.service.config
        sections: dict[str, Any] = {
            "source": config.source,
            "bookie": attrs.asdict(config.bookie),
            "plugins": attrs.asdict(config.plugins),
            "http": attrs.asdict(config.http),
            "journal": dict(config.journal),
            "ledger_storage": dict(config.ledger_storage),
            "entry_log_manager": dict(config.entry_log_manager),
            "placement": dict(config.placement),
        }
        return JSONResponse(redact(sections))


def ledger_page(stored: list[int], held: list[int], limit: int) -> tuple[list[int], list[int], int | None]:
    """One page of the store's ids and this bookie's over the same id range, given up to
    ``limit`` of each from the page's start: the range ends where the first full list
    ends (ids past it are the next page's), or nowhere when neither is full. Returns both
    lists cut to the range and the next page's start (None: this was the last page)."""
    full = [ids[-1] for ids in (stored, held) if len(ids) >= limit]
    if not full:
        return stored, held, None
    last = min(full)
    return [i for i in stored if i <= last], [i for i in held if i <= last], last + 1


def _query_int(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f"{low} or more"
        raise ValueError(f"{name}={raw!r}: give an integer {bounds}")
    return value


class _AuthMiddleware:
    """Runs the admin's ``authorize`` on every request, when there is one."""

    def __init__(self, app: Any, admin: AdminServer) -> None:
        self.app = app
        self.admin = admin

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.admin.authorize is not None:
            refused = await self.admin.authorize(Request(scope, receive))
            if refused is not None:
                await error(401, refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)
