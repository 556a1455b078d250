"""A job queue on bkframe: a FastAPI producer and worker processes sharing one subscription.

- ``producer``: a web service; ``POST /jobs`` appends the body as one record of the log
  ``jobs`` (``--queue``) (its key from ``X-Job-Key``, else a new id) and answers with the job's id and
  position once the bookies have it; ``GET /stats`` shows the subscription's backlog.
- ``worker``: consumes the ``key_shared`` subscription ``workers`` of ``jobs`` (any number
  of workers, from any host; one job of a key at a time, in order). Each job's result goes
  to the log ``jobs-results`` **exactly once**: the result is written as a closed ledger and
  committed together with the job's ack in one atomic step (docs/subscriptions.md,
  "Exactly once through a worker"); a worker killed between its output and its ack leaves
  no duplicate, the job simply comes again.

Run it (``pip install 'bkframe[examples]'``: FastAPI and uvicorn)::

    python examples/job_queue.py producer --metadata sqlite:///path/to/metadata.db --port 8000
    python examples/job_queue.py worker --metadata sqlite:///path/to/metadata.db      # as many as you like
    curl -d 'hello' -H 'X-Job-Key: user-7' localhost:8000/jobs      # {"id":"user-7","position":"0:0"}
    bkframe log read jobs-results --keys --metadata sqlite:///path/to/metadata.db
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Header, Request

import bkframe
from bkframe.errors import LogExistsError, SubscriptionError, SubscriptionExistsError

log = logging.getLogger("job_queue")

SUBSCRIPTION = "workers"


def names(queue: str) -> tuple[str, str, str]:
    """The queue's logs: its jobs, their results, the jobs that failed too often."""
    return queue, f"{queue}-results", f"{queue}-failed"


async def ensure_queue(bk: bkframe.Client, queue: str) -> None:
    """The logs and the subscription, made by whichever process comes first."""
    jobs, results, failed = names(queue)
    for name in (jobs, results):
        try:
            await bk.logs.create(name)
        except LogExistsError:
            pass
    try:
        await bk.logs.create_subscription(jobs, SUBSCRIPTION, kind="key_shared", lease_s=30, max_deliveries=5,
                                          dead_letter=failed)
    except SubscriptionExistsError:
        pass


def work(payload: bytes) -> bytes:
    """The job itself: here, a digest of its payload."""
    return hashlib.sha256(payload).hexdigest().encode()


# -- the producer --------------------------------------------------------------------------


def producer_app(metadata: str, queue: str) -> FastAPI:
    jobs = names(queue)[0]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with bkframe.open_client(metadata, explicit_lac_interval_s=0.01) as bk:  # a lone job is seen at once
            await ensure_queue(bk, queue)
            async with await bk.logs.open_writer(jobs) as writer:
                app.state.bk, app.state.writer = bk, writer
                yield

    app = FastAPI(lifespan=lifespan)

    @app.post("/jobs")
    async def submit(request: Request, x_job_key: str | None = Header(default=None)) -> dict[str, str]:
        job_id = x_job_key or uuid.uuid4().hex
        position = await app.state.writer.append(await request.body(), key=job_id.encode())
        return {"id": job_id, "position": str(position)}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        s = await app.state.bk.logs.subscription_stats(jobs, SUBSCRIPTION)
        return {"backlog": s.backlog, "in_flight": s.in_flight, "redelivered": s.redelivered,
                "dead_lettered": s.dead_lettered}

    return app


# -- a worker ------------------------------------------------------------------------------


async def worker(metadata: str, queue: str) -> None:
    name, results, _ = names(queue)
    async with bkframe.open_client(metadata) as bk:
        await ensure_queue(bk, queue)
        async with await bk.logs.subscribe(name, SUBSCRIPTION, prefetch=4) as jobs:
            async for job in jobs:
                out = await bk.create_ledger(custom=bkframe.ENVELOPE_CUSTOM)
                await out.append(bkframe.encode_record(bkframe.Record(work(job.payload), key=job.key)))
                await out.close()
                try:
                    await job.commit({results: [out.ledger_id]})
                except SubscriptionError as e:
                    # Another delivery's result landed first (or this one's, its answer lost):
                    # the job's result is in the results log once. The ledger is left alone:
                    # it may be the one that landed.
                    log.info("job %s: %s", job.position, e)
                    continue
                print(json.dumps({"done": str(job.position), "key": (job.key or b"").decode(),
                                  "delivery": job.delivery_count}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=["producer", "worker"])
    parser.add_argument("--metadata", required=True, help="The cluster's metadata store URI.")
    parser.add_argument("--queue", default="jobs", help="The queue's log (its results: QUEUE-results).")
    parser.add_argument("--port", type=int, default=8000, help="The producer's port (0: any free one).")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if args.role == "producer":
        import uvicorn

        uvicorn.run(producer_app(args.metadata, args.queue), host="127.0.0.1", port=args.port, log_level="info")
    else:
        import anyio

        try:
            anyio.run(worker, args.metadata, args.queue)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
