"""An asyncio web service on bkframe: FastAPI served by uvicorn, one log record per request.

At startup (FastAPI's lifespan) it opens one client and the log's one writer, and keeps
them for its whole life; every ``POST /records`` appends the request's body as one record
(its key from the ``X-Record-Key`` header, if any) and answers with the record's position
once the bookies acknowledged it; ``GET /records?last=N`` returns the last N records. On
shutdown (SIGTERM, Ctrl-C) uvicorn finishes the requests in flight, then the lifespan closes
the writer -- its segment is closed and the log given up, so the next writer opens it at
once, without recovery -- and the client.

Run it (``pip install 'bkframe[examples]'``: FastAPI and uvicorn)::

    python examples/web_service.py --metadata sqlite:///path/to/metadata.db --log web-events --port 8000
    curl -d 'hello' -H 'X-Record-Key: user-7' localhost:8000/records    # {"position":"0:0"}
    curl 'localhost:8000/records?last=5'

or as an app of your own uvicorn command: ``BKFRAME_METADATA=... uvicorn --factory
examples.web_service:app_from_env``. The same code runs on trio (Hypercorn's
``--worker-class trio``): the client is one API on both.
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse

import bkframe

log = logging.getLogger("web_service")


def _record_json(entry: Any) -> dict[str, Any]:
    """One record as JSON: ``value`` (or ``value_base64`` when it is not UTF-8), ``key``
    likewise, ``position`` as ``3:41`` and ``timestamp`` in ms since the epoch."""
    out: dict[str, Any] = {"position": str(entry.position), "timestamp": entry.timestamp}
    for field, raw in (("key", entry.key), ("value", entry.payload)):
        if raw is None:
            out[field] = None
            continue
        try:
            out[field] = raw.decode()
        except UnicodeDecodeError:
            out[f"{field}_base64"] = base64.b64encode(raw).decode()
    return out


async def _last(reader: Any, count: int) -> list[Any]:
    """The last ``count`` confirmed records (fewer if the log holds fewer), oldest first."""
    end = await reader.end()
    left = count
    # Count back over the segments' confirmed ranges, without reading an entry.
    for part in reversed(await reader.snapshot(bkframe.EARLIEST, end)):
        if part.entries >= left:
            return list(await reader.read(bkframe.Position(part.segment, part.last + 1 - left), end))
        left -= part.entries
    return list(await reader.read(bkframe.EARLIEST, end))


def create_app(metadata: str, log_name: str, *, password: bytes = b"", rollover_entries: int = 50_000) -> FastAPI:
    """The service on the cluster whose metadata store is ``metadata``, writing the log
    ``log_name`` (made with ``rollover_entries`` per segment if it does not exist)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # One client and one writer for the whole process: opening a writer fences the log's
        # previous writer, so a service must not open one per request.
        # explicit_lac_interval_s: a GET sees the last records within 0.2 s even when POSTs
        # pause (a ledger's last-add-confirmed otherwise rides on the next append).
        async with bkframe.open_client(metadata, explicit_lac_interval_s=0.2) as client:
            try:
                await client.logs.create(log_name, password=password, rollover_entries=rollover_entries)
            except bkframe.LogExistsError:
                pass
            async with await client.logs.open_writer(log_name, password=password) as writer:
                app.state.client, app.state.writer = client, writer
                log.info("writing log %r", log_name)
                yield
                # Uvicorn has answered every request by now: no append is in flight.
            log.info("closed log %r: the writer is released", log_name)

    app = FastAPI(title="bkframe web service example", lifespan=lifespan)

    @app.exception_handler(bkframe.BKError)
    async def bkframe_error(request: Request, error: bkframe.BKError) -> JSONResponse:
        # The record was not acknowledged. A writer fenced by another process's open_writer
        # stays fenced (one writer per log: run one instance, or one log per instance);
        # a metadata store away too long fails the writer too; a restart opens a new one.
        return JSONResponse({"error": str(error)}, status_code=503)

    @app.post("/records", status_code=201)
    async def append(request: Request, x_record_key: str | None = Header(default=None)) -> dict[str, str]:
        value = await request.body()
        key = x_record_key.encode() if x_record_key is not None else None
        # Appends of concurrent requests are pipelined by the writer; this one returns once
        # the bookies acknowledged it (an ack quorum fsynced it, for PD_JOURNAL segments).
        position = await request.app.state.writer.append(value, key=key)
        return {"position": str(position)}

    @app.get("/records")
    async def recent(request: Request, last: int = Query(default=10, ge=0, le=10_000)) -> list[dict[str, Any]]:
        reader = await request.app.state.client.logs.reader(log_name, password=password)
        return [_record_json(entry) for entry in await _last(reader, last)]

    return app


def app_from_env() -> FastAPI:
    """For ``uvicorn --factory examples.web_service:app_from_env``: ``$BKFRAME_METADATA``,
    ``$BKFRAME_LOG`` (default ``web-events``) and ``$BKFRAME_PASSWORD`` (default none)."""
    return create_app(
        os.environ["BKFRAME_METADATA"], os.environ.get("BKFRAME_LOG", "web-events"),
        password=os.environ.get("BKFRAME_PASSWORD", "").encode(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metadata", default=os.environ.get("BKFRAME_METADATA"),
                        help="the cluster's metadata store URI (default: $BKFRAME_METADATA)")
    parser.add_argument("--log", default="web-events", help="the log to write (made if missing)")
    parser.add_argument("--rollover-entries", type=int, default=50_000, help="records per segment of a new log")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port (uvicorn prints it)")
    args = parser.parse_args()
    if not args.metadata:
        parser.error("give --metadata URI or set $BKFRAME_METADATA")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s:     %(name)s: %(message)s")
    log.setLevel(logging.INFO)  # this service's own lines; the libraries' warnings only
    app = create_app(args.metadata, args.log, rollover_entries=args.rollover_entries)
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
