"""The ZooKeeper and etcd stores at scale (docs/metadata.md, "Layout and scale"): creates
per second with ids in blocks, every id of LEDGERS ledgers listed in pages, and the
ledgers of one bookie that holds HOT of them.

    python benchmarks/scaling/metadata_stores.py [LEDGERS] [HOT]   # 100000 30000; STORES=zk,etcd CLIENTS=4 TASKS=16

Starts its own ZooKeeper and etcd (bkframe.testing.servers). For each store: CLIENTS
processes create LEDGERS ledgers between them (each takes ids in blocks of BLOCK with
``new_ledger_ids`` and creates with TASKS concurrent tasks; ensembles of 3 over 100
simulated bookies, HOT of the ledgers naming bookie ``hot``); then, in this process, every
id in pages of ``LEDGER_PAGE`` (``iter_ledger_ids``), every id in one ``list_ledgers()``
call, ``hot``'s ledgers in pages, and ``list_bookies`` with 100 bookies registered. Times
are wall-clock; memory is tracemalloc's peak of the same listing run again (Python
allocations, the store client's threads included). Prints one JSON object per store.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from bkframe.core.interfaces.metadata_store import iter_ledger_ids, iter_ledgers_of_bookie
from bkframe.core.ledger_keys import password_hash
from bkframe.core.metadata import BookieInfo, LedgerMetadata
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.servers import EtcdServer, ZooKeeperServer

LEDGERS = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
HOT = int(sys.argv[2]) if len(sys.argv) > 2 else 30_000
STORES = os.environ.get("STORES", "zk,etcd").split(",")
CLIENTS = int(os.environ.get("CLIENTS", "4"))
TASKS = int(os.environ.get("TASKS", "16"))
BLOCK = int(os.environ.get("BLOCK", "1000"))
BOOKIES = 100


def metadata(ledger_id: int) -> LedgerMetadata:
    others = [f"bk-{(ledger_id + k) % BOOKIES:02d}" for k in range(3)]
    hot = (ledger_id * HOT) % LEDGERS < HOT
    ensemble = ("hot", *others[:2]) if hot else tuple(others)
    return LedgerMetadata(
        ledger_id, 3, 2, 2, ((0, ensemble),), password_hash=password_hash(b"pw"), custom={"application": "scale"}
    )


async def fill(uri: str, count: int, ready: Any, go: Any, done: Any) -> None:
    """One client: ``count`` ledgers, ids in blocks; starts when every client is ready (its
    imports and connection are not timed) and reports when it ends."""
    store = PluginManager().metadata_store(uri, create=True)
    await store.list_bookies()  # connected
    ready.put(os.getpid())
    await trio.to_thread.run_sync(go.wait)
    made = 0

    async def ids() -> AsyncIterator[int]:
        nonlocal made
        while made < count:
            block = await store.new_ledger_ids(min(BLOCK, count - made))
            made += len(block)
            for ledger_id in block:
                yield ledger_id

    source = ids()
    lock = trio.Lock()

    async def worker() -> None:
        while True:
            async with lock:
                try:
                    ledger_id = await source.__anext__()
                except StopAsyncIteration:
                    return
            await store.create_ledger(metadata(ledger_id))

    try:
        async with trio.open_nursery() as nursery:
            for _ in range(TASKS):
                nursery.start_soon(worker)
        done.put(time.time())
    finally:
        await store.aclose()


def fill_process(uri: str, count: int, ready: Any, go: Any, done: Any) -> None:
    trio.run(fill, uri, count, ready, go, done)


async def measured(fn: Callable[[], Awaitable[int]]) -> dict[str, float]:
    """Timed alone, then again under tracemalloc for the memory (it slows allocations)."""
    started = time.perf_counter()
    n = await fn()
    seconds = time.perf_counter() - started
    tracemalloc.start()
    await fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"ids": n, "s": round(seconds, 3), "peak_MB": round(peak / 1e6, 2)}


async def measure(uri: str) -> dict[str, Any]:
    out: dict[str, Any] = {"uri": uri.split("://")[0], "ledgers": LEDGERS, "hot": HOT, "clients": CLIENTS, "tasks": TASKS}
    context = multiprocessing.get_context("spawn")
    ready, go, done = context.Queue(), context.Event(), context.Queue()
    workers = [context.Process(target=fill_process, args=(uri, LEDGERS // CLIENTS, ready, go, done)) for _ in range(CLIENTS)]
    for w in workers:
        w.start()
    for _ in workers:
        await trio.to_thread.run_sync(ready.get)
    started = time.time()
    go.set()
    ended = max([await trio.to_thread.run_sync(done.get) for _ in workers])
    for w in workers:
        await trio.to_thread.run_sync(w.join)
    out["creates_per_s"] = round(CLIENTS * (LEDGERS // CLIENTS) / (ended - started))
    store = PluginManager().metadata_store(uri, create=True)
    try:

        async def paged() -> int:
            return sum([len(page) async for page in iter_ledger_ids(store)])

        async def at_once() -> int:
            return len(await store.list_ledgers())

        async def hot() -> int:
            return sum([len(page) async for page in iter_ledgers_of_bookie(store, "hot")])

        out["list_paged"] = await measured(paged)
        out["list_at_once"] = await measured(at_once)
        out["hot_paged"] = await measured(hot)
        async with trio.open_nursery() as nursery:
            registrations = [
                await store.register_bookie(BookieInfo(f"bk-{i:02d}", f"10.0.0.{i}:3181"), ttl_s=6, nursery=nursery)
                for i in range(BOOKIES)
            ]
            await store.list_bookies()
            started = time.perf_counter()
            for _ in range(100):
                assert len(await store.list_bookies(writable_only=True)) == BOOKIES
            out["list_bookies_ms"] = round((time.perf_counter() - started) * 10, 2)
            for r in registrations:
                await r.aclose()
    finally:
        await store.aclose()
    return out


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bk-meta-scale-"))
    for name in STORES:
        server: ZooKeeperServer | EtcdServer
        if name == "zk":
            server = ZooKeeperServer(root / "zk").start()
            uri = f"zk://{server.address}/scale"
        else:
            server = EtcdServer(root / "etcd").start()
            uri = f"etcd://{server.address}/scale"
        try:
            print(json.dumps(trio.run(measure, uri)), flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
