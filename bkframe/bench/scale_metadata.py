"""``bkframe bench scale metadata``: the metadata side of a million ledgers (issue 27),
timed against its targets (docs/scaling.md, "Metadata").

Fills a metadata store with ``--ledgers`` ledgers spread over ``--bookies`` simulated bookie
ids (metadata only: no bookie, no entry) and ``--logs`` named logs, in ``--fill-workers``
processes, each taking ids in blocks and keeping many creates in flight. Then times, in
this process unless said:

* a page of the ledger listing (``list_ledgers(start, limit=LEDGER_PAGE)``, median of 5
  pages from random ids);
* the whole listing, paged (``iter_ledger_ids``): its time, and separately its peak Python
  memory (tracemalloc);
* one bookie's ledgers (``iter_ledgers_of_bookie``), the metadata work of that bookie's GC
  round and of its boot after an unclean stop: time and peak memory;
* creates/s from ``--clients`` processes for ``--seconds``, each creating as a client
  does -- ids from :class:`~bkframe.client.ledger_ids.LedgerIds`, candidates from
  :class:`~bkframe.client.bookies.listing.BookieSet` (the simulated bookies are registered
  meanwhile), the random placement policy, one ``create_ledger`` -- without the bookie
  connections a real create opens, with the store calls per create counted;
* a GC round's metadata work: a real :class:`~bkframe.bookie.runtime.garbage_collector.GarbageCollector`
  pass (``deleted_from_store``) of a simulated bookie holding the ledgers the store indexes
  for it plus 100 the store does not have: time (best and worst of 3) and peak memory;
* the operators' views' first page (median of 3): the status page's body
  (:meth:`~bkframe.admin.status.StatusPage.cluster`) and ``/api/v1/ledger/list``'s store read;
* a lost bookie: a real :class:`~bkframe.autorecovery.auditor.Auditor` with the simulated
  bookies registered (``lost_bookie_grace_s`` 0), one registration closed, and the seconds
  until every ledger of that bookie's index is marked (``count_under_replicated`` polled
  every 0.5 s); then, with the marks there, the status page, ``bkframe autorecovery
  status``'s read, a worker's look at the marks (a page of 32) and their count.

``--no-fill`` times a store filled before (the figures then count what it holds).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, cast

import anyio
import attrs
import click
import trio

from bkframe.admin.http import LIST_LIMIT
from bkframe.admin.status import StatusPage
from bkframe.autorecovery.auditor import Auditor
from bkframe.autorecovery.service import cluster_status
from bkframe.autorecovery.worker import MARKS_PER_LOOK
from bkframe.bookie.bookie import Bookie
from bkframe.bookie.runtime.garbage_collector import GarbageCollector
from bkframe.cli import interrupt
from bkframe.cli.options import AT_LEAST_ONE
from bkframe.client.bookies.listing import BookieSet
from bkframe.client.client import Client
from bkframe.client.context import ClientContext
from bkframe.client.ledger_ids import LedgerIds
from bkframe.client.logs.model import LogMetadata, LogSettings, Segment
from bkframe.common.cluster_record import init_cluster
from bkframe.common.each_bounded import each_bounded
from bkframe.core.config import AutorecoveryConfig
from bkframe.core.interfaces.ledger_storage import LedgerState
from bkframe.core.interfaces.metadata_store import MetadataStore, iter_ledger_ids, iter_ledgers_of_bookie, iter_under_replicated
from bkframe.core.interfaces.placement import Candidate
from bkframe.core.ledger_keys import password_hash
from bkframe.core.metadata import LEDGER_PAGE, BookieInfo, LedgerMetadata, LedgerStateName, UnderReplicated
from bkframe.core.plugin_manager import PluginManager

#: Creates each fill worker keeps in flight, and the id block it takes at a time.
FILL_IN_FLIGHT = 64
FILL_BLOCK = 1000
#: Store clients each fill process spreads them over.
FILL_CLIENTS = 4
#: Creates each client process keeps in flight while creates/s is measured.
CREATE_IN_FLIGHT = 16
#: The targets of issue 27 this benchmark checks.
PAGE_TARGET_S = 1.0
BOOKIE_TARGET_S = 1.0
MEMORY_TARGET_MB = 50.0
CREATES_TARGET = 1000.0
VIEW_TARGET_S = 1.0
LOST_TARGET_S = 60.0
#: Ledgers the simulated bookie's GC finds deleted from the store (each confirmed by a read).
GC_DELETED = 100


def bookie_ids(count: int) -> list[str]:
    return [f"sim-bookie-{i:03d}" for i in range(count)]


def ensemble_of(ledger_id: int, bookies: list[str]) -> tuple[str, ...]:
    """Three consecutive simulated bookies: each holds 3/len(bookies) of the ledgers."""
    return tuple(bookies[(ledger_id + k) % len(bookies)] for k in range(3))


def ledger(ledger_id: int, ensemble: tuple[str, ...], *, closed: bool = True) -> LedgerMetadata:
    """A ledger as a writer leaves it (E=3 W=2 A=2, closed with 100 entries of 1 KiB), or
    as a create makes it (open, empty)."""
    return LedgerMetadata(
        ledger_id=ledger_id, ensemble_size=3, write_quorum=2, ack_quorum=2, fragments=((0, ensemble),),
        password_hash=password_hash(b"bench"), state=LedgerStateName.CLOSED if closed else LedgerStateName.OPEN,
        last_entry_id=99 if closed else -1, length=102_400 if closed else 0, custom={"app": "bench-scale"},
        writer="bench-scale",
    )


# -- the fill: worker processes ------------------------------------------------------------


def _fill_worker(uri: str, ledgers: int, logs: int, worker: int, bookies: int) -> tuple[int, int]:
    return interrupt.run(_fill, uri, ledgers, logs, worker, bookie_ids(bookies))


async def _fill(uri: str, ledgers: int, logs: int, worker: int, bookies: list[str]) -> tuple[int, int]:
    # Several clients of the store: a store client runs a few requests at once (its thread
    # limiter), and the fill is bound by their round trips, not by this process's CPU.
    stores = [PluginManager().metadata_store(uri) for _ in range(FILL_CLIENTS)]
    made: list[int] = []
    try:
        ids = LedgerIds(stores[0], FILL_BLOCK, first_block=FILL_BLOCK)

        async def create_ledgers(k: int, n: int) -> None:
            store = stores[k % len(stores)]
            for _ in range(n):
                ledger_id = await ids.next()
                await store.create_ledger(ledger(ledger_id, ensemble_of(ledger_id, bookies)))
                made.append(ledger_id)

        async def create_logs(k: int, first: int, n: int) -> None:
            store = stores[k % len(stores)]
            for j in range(first, first + n):
                ledger_id = made[j % len(made)] if made else 0
                segment = Segment(0, ledger_id, closed=True, last_entry_id=99, length=102_400, created_at=time.time())
                record = LogMetadata(
                    name=f"bench-log-{worker:02d}-{j:08d}", settings=LogSettings(), password_hash=password_hash(b"bench"),
                    uid=uuid.uuid4().hex, segments=(segment,), next_segment=1,
                )
                await store.create_log(record.name, record.serialize())

        await _spread(create_ledgers, ledgers)
        await _spread(create_logs, logs, with_first=True)
    finally:
        for store in stores:
            await store.aclose()
    return len(made), logs


async def _spread(fn: Callable[..., Awaitable[None]], total: int, *, with_first: bool = False) -> None:
    """``fn(k, [first,] n)`` over ``total`` items in ``FILL_IN_FLIGHT`` concurrent tasks."""
    async with trio.open_nursery() as nursery:
        for k in range(FILL_IN_FLIGHT):
            n = total // FILL_IN_FLIGHT + (1 if k < total % FILL_IN_FLIGHT else 0)
            if n:
                first = k * (total // FILL_IN_FLIGHT) + min(k, total % FILL_IN_FLIGHT)
                nursery.start_soon(*((fn, k, first, n) if with_first else (fn, k, n)))


def fill(uri: str, ledgers: int, logs: int, bookies: int, workers: int, say: Callable[[str], None]) -> dict[str, float]:
    store = PluginManager().metadata_store(uri, create=True)
    interrupt.run(_init, store)
    t = time.monotonic()
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        jobs = [
            pool.submit(_fill_worker, uri, ledgers // workers + (w < ledgers % workers), logs // workers + (w < logs % workers),
                        w, bookies)
            for w in range(workers)
        ]
        made = [job.result() for job in jobs]
    seconds = time.monotonic() - t
    say(f"filled {sum(m[0] for m in made)} ledgers and {sum(m[1] for m in made)} logs in {seconds:.0f} s")
    return {"fill_s": seconds, "fill_per_s": (ledgers + logs) / seconds}


async def _init(store: MetadataStore) -> None:
    try:
        await init_cluster(store)
    finally:
        await store.aclose()


# -- creates/s: client processes -----------------------------------------------------------


class CountingStore:
    """The store, counting the calls made to it."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr) or name == "aclose":
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await attr(*args, **kwargs)

        return counted


def _create_worker(uri: str, start_at: float, seconds: float) -> tuple[int, dict[str, int]]:
    return interrupt.run(_creates, uri, start_at, seconds)


async def _creates(uri: str, start_at: float, seconds: float) -> tuple[int, dict[str, int]]:
    plugins = PluginManager()
    real = plugins.metadata_store(uri)
    store: Any = CountingStore(real)
    placement = plugins.placement_policy("random", {}, source="bench-scale")
    ids = LedgerIds(store, 100)
    done = 0
    try:
        async with anyio.create_task_group() as nursery:
            bookies = BookieSet(store, nursery, 2.0)
            await trio.sleep(max(0.0, start_at - time.time()))
            end = trio.current_time() + seconds

            async def creates() -> None:
                nonlocal done
                while trio.current_time() < end:
                    # What Client.create_ledger does, less the bookie connections.
                    view = await bookies.view()
                    candidates = [Candidate(b.bookie_id, b.rack, False) for b in view.writable]
                    ensemble = placement.new_ensemble(candidates, ensemble_size=3, write_quorum=2)
                    await store.create_ledger(ledger(await ids.next(), tuple(ensemble), closed=False))
                    done += 1

            async with trio.open_nursery() as workers:
                for _ in range(CREATE_IN_FLIGHT):
                    workers.start_soon(creates)
            nursery.cancel_scope.cancel()
    finally:
        await real.aclose()
    return done, dict(store.calls)


async def creates_per_second(uri: str, bookies: int, clients: int, seconds: float) -> dict[str, float]:
    store = PluginManager().metadata_store(uri)
    try:
        async with trio.open_nursery() as nursery:
            # The simulated bookies, registered for the clients to choose among.
            registrations = [
                await store.register_bookie(BookieInfo(b, f"127.0.0.1:{10000 + i}"), ttl_s=30, nursery=nursery)
                for i, b in enumerate(bookie_ids(bookies))
            ]
            start_at = time.time() + 3.0 + clients  # past the processes' start-up
            with ProcessPoolExecutor(clients, mp_context=multiprocessing.get_context("spawn")) as pool:
                jobs = [pool.submit(_create_worker, uri, start_at, seconds) for _ in range(clients)]
                results = await trio.to_thread.run_sync(lambda: [job.result() for job in jobs])
            for r in registrations:
                await r.aclose()
    finally:
        await store.aclose()
    created = sum(n for n, _ in results)
    calls: Counter[str] = Counter()
    for _, c in results:
        calls.update(c)
    return {
        "creates_per_s": created / seconds,
        "store_calls_per_create": sum(calls.values()) / max(created, 1),
        "bookie_listings": calls["list_bookies"],
        "id_blocks": calls["new_ledger_ids"],
    }


# -- the timings ---------------------------------------------------------------------------


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t = time.perf_counter()
    result = await fn()
    return time.perf_counter() - t, result


async def median_s(fn: Callable[[], Awaitable[Any]], runs: int = 3) -> float:
    """The median time of ``runs`` calls (this machine is shared: one call can be unlucky)."""
    return statistics.median([(await timed(fn))[0] for _ in range(runs)])


async def peak_mb(fn: Callable[[], Awaitable[Any]]) -> float:
    """Peak Python memory allocated while ``fn`` runs, in MB (tracemalloc)."""
    tracemalloc.start()
    try:
        await fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


@attrs.define
class Admin:
    """What the status page reads of its admin service: the store, and no client (each
    registered bookie's row says "no client" at once instead of asking the bookie)."""

    metadata: MetadataStore
    client: Client | None = None

    @property
    def bookie(self) -> Bookie:
        raise AssertionError("the page's body does not need the bookie")

    def store(self) -> MetadataStore | None:
        return self.metadata


class _Storage:
    """A bookie's ledger storage as the GC sees it: the ids it holds and their state."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def ledgers(self) -> list[int]:
        return list(self.ids)

    def ledger_state(self, ledger_id: int) -> LedgerState:
        return LedgerState(ledger_id, master_key=b"k" * 20)


@attrs.define
class _GcBookie:
    bookie_id: str
    storage: _Storage


async def gc_round(store: MetadataStore, bookie_id: str) -> dict[str, float]:
    """The metadata work of a GC pass of ``bookie_id`` holding what the store indexes for it
    and :data:`GC_DELETED` ledgers the store does not have: best and worst of 3 passes."""
    held = [i async for ids in iter_ledgers_of_bookie(store, bookie_id) for i in ids]
    top = (held[-1] if held else 0) + 10**9
    deleted = list(range(top, top + GC_DELETED))
    gc = GarbageCollector(cast(Bookie, _GcBookie(bookie_id, _Storage(held + deleted))), store, 60.0)
    seconds = []
    for _ in range(3):
        took, doomed = await timed(gc.deleted_from_store)
        seconds.append(took)
        if doomed != deleted:
            raise click.ClickException(f"the GC pass found {len(doomed)} ledgers deleted, not {len(deleted)}")
    # Memory in a pass of its own: tracemalloc slows the allocations it traces severalfold.
    return {"gc_local_ledgers": len(held) + len(deleted), "gc_s": min(seconds), "gc_worst_s": max(seconds),
            "gc_mb": await peak_mb(gc.deleted_from_store)}


async def clear_marks(store: MetadataStore) -> int:
    """Clear every mark (of an earlier run): the lost bookie's marks are then all new."""
    cleared = 0

    async def clear(mark: UnderReplicated) -> None:
        await store.clear_under_replicated(mark.ledger_id, mark.bookies)

    async for page in iter_under_replicated(store):
        await each_bounded(page, FILL_IN_FLIGHT, clear)
        cleared += len(page)
    return cleared


async def lost_bookie(uri: str, bookies: int) -> dict[str, float]:
    """Seconds from a lost bookie's registration gone until all its ledgers are marked; then
    the views with those marks there."""
    store = PluginManager().metadata_store(uri)
    out: dict[str, float] = {}
    ids = bookie_ids(bookies)
    victim = ids[7 % bookies]
    try:
        out["marks_cleared_before"] = await clear_marks(store)
        expected = sum([len(page) async for page in iter_ledgers_of_bookie(store, victim)])
        async with anyio.create_task_group() as nursery:
            registrations = {
                b: await store.register_bookie(BookieInfo(b, f"127.0.0.1:{10000 + i}"), ttl_s=30, nursery=nursery)
                for i, b in enumerate(ids)
            }
            config = AutorecoveryConfig(lost_bookie_grace_s=0.0, check_interval_s=1.0)
            ctx = ClientContext.create(nursery, store, PluginManager())
            auditor = Auditor(store, ctx.pool, "bench-scale", config)
            await nursery.start(auditor.run)
            with trio.fail_after(60):
                while not (auditor.status.auditing and set(ids) <= set(auditor.last_seen)):
                    await trio.sleep(0.1)
            lost_at = time.perf_counter()
            await registrations[victim].aclose()
            first = 0.0
            marked = 0
            with trio.move_on_after(10 * LOST_TARGET_S):
                while True:
                    marked = await store.count_under_replicated()
                    if marked and not first:
                        first = time.perf_counter() - lost_at
                    if marked >= expected:
                        break
                    await trio.sleep(0.5)
            out |= {"lost_ledgers": expected, "lost_marked": marked, "lost_first_mark_s": first,
                    "lost_all_marked_s": time.perf_counter() - lost_at}
            # The views, with the marks there (and the auditor's full check reading meanwhile).
            page = StatusPage(Admin(store))
            out["status_page_marked_s"] = await median_s(lambda: page.cluster(store))
            out["autorecovery_status_s"] = await median_s(lambda: cluster_status(store))
            out["worker_look_s"] = await median_s(
                lambda: store.list_under_replicated(start=random.randint(0, expected * bookies // 3), limit=MARKS_PER_LOOK),
                runs=5,
            )
            out["marks_count_s"] = await median_s(store.count_under_replicated)
            nursery.cancel_scope.cancel()
    finally:
        await store.aclose()
    return out


async def measure(uri: str, bookies: int) -> dict[str, float]:
    store = PluginManager().metadata_store(uri)
    out: dict[str, float] = {}
    try:

        async def full() -> int:
            return sum([len(ids) async for ids in iter_ledger_ids(store)])

        out["full_listing_s"], out["ledgers"] = await timed(full)
        out["full_listing_mb"] = await peak_mb(full)
        top = (await store.list_ledgers(start=0, limit=1))[0] if out["ledgers"] else 0
        out["page_s"] = await median_s(
            lambda: store.list_ledgers(start=random.randint(top, top + int(out["ledgers"])), limit=LEDGER_PAGE), runs=5
        )
        one = bookie_ids(bookies)[7 % bookies]

        async def of_bookie() -> int:
            return sum([len(ids) async for ids in iter_ledgers_of_bookie(store, one)])

        out["bookie_s"], out["bookie_ledgers"] = await timed(of_bookie)
        out["bookie_mb"] = await peak_mb(of_bookie)
        out |= await gc_round(store, one)
        page = StatusPage(Admin(store))
        out["status_page_s"] = await median_s(lambda: page.cluster(store))
        out["ledger_list_api_s"] = await median_s(lambda: store.list_ledgers(start=0, limit=LIST_LIMIT))
        out["logs"] = await store.count_logs()
    finally:
        await store.aclose()
    return out


def table(r: dict[str, float]) -> list[tuple[str, str, str, str]]:
    """(what, measured, target, met) rows."""

    def met(ok: bool) -> str:
        return "yes" if ok else "NO"

    return [
        ("a page of the ledger listing (10^4 ids)", f"{r['page_s'] * 1000:.0f} ms", f"< {PAGE_TARGET_S:.0f} s (item 2)",
         met(r["page_s"] < PAGE_TARGET_S)),
        (f"the whole listing, paged ({r['ledgers']:.0f} ids)", f"{r['full_listing_s']:.1f} s, {r['full_listing_mb']:.1f} MB",
         f"memory <= {MEMORY_TARGET_MB:.0f} MB (a page, not N)", met(r["full_listing_mb"] <= MEMORY_TARGET_MB)),
        (f"one bookie's index, paged ({r['bookie_ledgers']:.0f} ids: boot)", f"{r['bookie_s']:.2f} s, {r['bookie_mb']:.1f} MB",
         f"<= {BOOKIE_TARGET_S:.0f} s, <= {MEMORY_TARGET_MB:.0f} MB (item 3)",
         met(r["bookie_s"] <= BOOKIE_TARGET_S and r["bookie_mb"] <= MEMORY_TARGET_MB)),
        ("creates/s, cluster-wide", f"{r['creates_per_s']:.0f}/s ({r['store_calls_per_create']:.2f} store calls each)",
         f">= {CREATES_TARGET:.0f}/s (item 5)", met(r["creates_per_s"] >= CREATES_TARGET)),
        (f"status page, first page ({r['logs']:.0f} logs)", f"{r['status_page_s'] * 1000:.0f} ms",
         f"< {VIEW_TARGET_S:.0f} s (item 7)", met(r["status_page_s"] < VIEW_TARGET_S)),
        ("/api/v1/ledger/list, first page", f"{r['ledger_list_api_s'] * 1000:.0f} ms", f"< {VIEW_TARGET_S:.0f} s (item 7)",
         met(r["ledger_list_api_s"] < VIEW_TARGET_S)),
        (f"GC round's metadata work ({r['gc_local_ledgers']:.0f} local ledgers)",
         f"{r['gc_s']:.2f}-{r['gc_worst_s']:.2f} s, {r['gc_mb']:.1f} MB",
         f"<= {BOOKIE_TARGET_S:.0f} s, <= {MEMORY_TARGET_MB:.0f} MB (item 3)",
         met(r["gc_worst_s"] <= BOOKIE_TARGET_S and r["gc_mb"] <= MEMORY_TARGET_MB)),
        (f"lost bookie: its {r['lost_ledgers']:.0f} ledgers all marked",
         f"{r['lost_all_marked_s']:.1f} s (first {r['lost_first_mark_s']:.1f} s; {r['lost_marked']:.0f} marked)",
         f"<= {LOST_TARGET_S:.0f} s (item 4)",
         met(r["lost_marked"] >= r["lost_ledgers"] and r["lost_all_marked_s"] <= LOST_TARGET_S)),
        (f"status page with {r['lost_marked']:.0f} marks", f"{r['status_page_marked_s'] * 1000:.0f} ms",
         f"< {VIEW_TARGET_S:.0f} s (item 7)", met(r["status_page_marked_s"] < VIEW_TARGET_S)),
        ("autorecovery status (count, 100 marks)", f"{r['autorecovery_status_s'] * 1000:.0f} ms",
         f"< {VIEW_TARGET_S:.0f} s (item 7)", met(r["autorecovery_status_s"] < VIEW_TARGET_S)),
        (f"a worker's look ({MARKS_PER_LOOK} marks) / the count", f"{r['worker_look_s'] * 1000:.1f} / "
         f"{r['marks_count_s'] * 1000:.1f} ms", "a page, not every mark", "-"),
    ]


@click.command(name="metadata")
@click.option("--metadata", "uri", required=True, metavar="URI", help="The store to fill and time (made if absent).")
@click.option("--ledgers", type=AT_LEAST_ONE, default=1_000_000, show_default=True)
@click.option("--logs", type=click.IntRange(min=0), default=100_000, show_default=True)
@click.option("--bookies", type=click.IntRange(min=3), default=100, show_default=True, help="Simulated bookie ids.")
@click.option("--fill-workers", type=AT_LEAST_ONE, default=2, show_default=True, help="Processes filling the store.")
@click.option("--no-fill", is_flag=True, help="Time the store as it is (filled by an earlier run).")
@click.option("--clients", type=AT_LEAST_ONE, default=4, show_default=True, help="Processes creating ledgers.")
@click.option("--seconds", type=click.FloatRange(min=0.5), default=10.0, show_default=True, help="How long they create.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the table.")
def metadata(
    uri: str, ledgers: int, logs: int, bookies: int, fill_workers: int, no_fill: bool, clients: int, seconds: float,
    as_json: bool,
) -> None:
    """Fill a store with ledgers and logs (metadata only) and time the metadata targets."""

    def say(line: str) -> None:
        if not as_json:
            click.echo(line, err=True)

    machine = f"{os.cpu_count()} cores, {platform.platform()}, Python {sys.version.split()[0]}"
    result: dict[str, Any] = {"uri": uri, "machine": machine}
    if not no_fill:
        say(f"filling {uri} with {ledgers} ledgers over {bookies} bookie ids and {logs} logs ({fill_workers} processes)")
        result |= fill(uri, ledgers, logs, bookies, fill_workers, say)
    say("timing the listings, a GC round and the views")
    result |= interrupt.run(measure, uri, bookies)
    say("losing a bookie: timing its marks, then the views with them")
    result |= interrupt.run(lost_bookie, uri, bookies)
    say(f"creating from {clients} client processes for {seconds:.0f} s")
    result |= interrupt.run(creates_per_second, uri, bookies, clients, seconds)
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
        return
    rows = [("what", "measured", "target", "met"), *table(result)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        click.echo(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    filled = f"; filled at {result['fill_per_s']:.0f} records/s" if "fill_s" in result else ""
    click.echo(f"{machine}; store {uri}{filled}")
