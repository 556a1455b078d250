"""The status page (``/`` on a bookie's admin port): the whole cluster at a glance.

Server-rendered HTML, no script and no build step: bookies (state, disk use, request rates,
from their registration and GET_BOOKIE_INFO), ledgers and logs with their sizes, what is
under-replicated and what is in limbo. Each bookie is asked with a timeout, in parallel: a
bookie that does not answer is shown so, and does not hold the page.

Ledgers, logs and under-replicated ledgers are shown a page at a time (``MAX_ROWS``,
ascending from the query's ``ledgers_from`` id, ``logs_from`` name and ``under_from`` id,
with a link to the next page): the page reads one page of ledger ids and that page's
metadata, however many ledgers the cluster holds, and one page of marks with their count.
"""

from __future__ import annotations

import html
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import trio
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from bkframe.bookie.bookie import Bookie
from bkframe.client.client import Client
from bkframe.client.logs.model import LogMetadata
from bkframe.common.each_bounded import each_bounded
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.errors import BKError, MetadataError, UnauthorizedError

#: How long the page waits for one bookie's info, and for the metadata store.
INFO_TIMEOUT_S = 2.0
STORE_TIMEOUT_S = 5.0
#: Ledgers and logs (and under-replicated ledgers) shown per page.
MAX_ROWS = 200
#: Records (ledger or log metadata) read at once for a page's rows.
CONCURRENT_READS = 16
K = TypeVar("K")
V = TypeVar("V")
#: How long the page waits for its logs' cursors (lags need each log's end).
CURSORS_TIMEOUT_S = 2.0

STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f0f0f0; }
.bad { color: #b00; font-weight: bold; }
.ok { color: #070; }
.more { margin-top: -1em; margin-bottom: 1.5em; }
"""


def esc(value: object) -> str:
    return html.escape(str(value))


def table(table_id: str, headers: list[str], rows: list[list[str]], empty: str) -> str:
    """``rows`` hold HTML already escaped."""
    if not rows:
        return f'<p id="{table_id}">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class AdminView(Protocol):
    """What the status page reads of the admin service it belongs to
    (:class:`~bkframe.admin.http.AdminServer`, which imports this module)."""

    #: The admin service's own client, to ask every bookie for its info (None without a store).
    client: Client | None

    @property
    def bookie(self) -> Bookie: ...

    def store(self) -> MetadataStore | None: ...


class StatusPage:
    def __init__(self, admin: AdminView) -> None:
        self.admin = admin
        #: The last counters seen of each bookie, to show request rates since the last view.
        self._last: dict[str, tuple[float, dict[str, int]]] = {}

    async def render(self, request: Request) -> Response:
        store = self.admin.store()
        me = esc(self.admin.bookie.bookie_id)
        parts = [f"<h1>bkframe cluster</h1><p>page from bookie <b>{me}</b>, {esc(time.ctime())}</p>"]
        if store is None:
            parts.append("<p>This bookie has no metadata store: there is no cluster to show.</p>")
        else:
            ledgers_from = _query_int(request, "ledgers_from")
            logs_from = request.query_params.get("logs_from", "")
            under_from = _query_int(request, "under_from")
            try:
                with trio.fail_after(STORE_TIMEOUT_S):
                    parts.append(await self.cluster(store, ledgers_from=ledgers_from, logs_from=logs_from, under_from=under_from))
            except (trio.TooSlowError, MetadataError) as e:
                parts.append(f'<p class="bad">The metadata store did not answer: {esc(repr(e))}</p>')
        page = (
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>bkframe status</title>"
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>"
        )
        return HTMLResponse(page)

    async def cluster(
        self, store: MetadataStore, *, ledgers_from: int = 0, logs_from: str = "", under_from: int = 0
    ) -> str:
        """The page's body: the bookies, a page of ledgers from id ``ledgers_from``, of logs
        from name ``logs_from`` and of under-replicated ledgers from id ``under_from`` (with
        their count), and what is in limbo."""
        registered = await store.list_bookies()
        decommissioned = await store.list_decommissioned()
        infos: dict[str, dict[str, Any] | str] = {}
        async with trio.open_nursery() as nursery:
            for b in registered:
                nursery.start_soon(self._info, b.bookie_id, infos)
        now = time.monotonic()
        bookie_rows = []
        limbo: list[list[str]] = []
        for b in sorted(registered, key=lambda b: b.bookie_id):
            info = infos.get(b.bookie_id, "no answer")
            state = "draining" if b.bookie_id in decommissioned else "read-only" if b.read_only else "writable"
            if isinstance(info, str):
                unreachable = f'<span class="bad">{esc(info)}</span>'
                bookie_rows.append([esc(b.bookie_id), esc(b.address), esc(state), unreachable, "", "", ""])
                continue
            counters = info.get("counters", {})
            rates = self._rates(b.bookie_id, now, counters, float(info.get("uptime_s", 0.0)))
            disk = f"{info.get('disk_usage', 0.0):.1%} of {human_bytes(info.get('total_disk_bytes', 0))}"
            bookie_rows.append([
                esc(b.bookie_id), esc(b.address), esc(state), disk, esc(info.get("ledgers", "")),
                f"{rates['requests']:.1f} req/s, {rates['entries_added']:.1f} adds/s, {rates['entries_read']:.1f} reads/s",
                esc(b.rack or "(default)"),
            ])
            limbo.extend([str(ledger_id), esc(b.bookie_id)] for ledger_id in info.get("limbo_ledgers", []))
        parts = [
            f"<h2>Bookies ({len(registered)})</h2>",
            table("bookies", ["bookie", "address", "state", "disk use", "ledgers", "request rate", "rack"], bookie_rows,
                  "no bookie is registered"),
        ]
        # The three are independent reads of the store: at once, not one after the other.
        sections: dict[str, list[str]] = {}

        async def section(name: str, fetch: Callable[[], Awaitable[list[str]]]) -> None:
            sections[name] = await fetch()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(section, "ledgers", lambda: self._ledgers(store, ledgers_from))
            nursery.start_soon(section, "logs", lambda: self._logs(store, logs_from))
            nursery.start_soon(section, "under", lambda: self._under_replicated(store, under_from))
        parts += sections["ledgers"] + sections["logs"] + sections["under"]
        parts += [
            f'<h2>Ledgers in limbo (<span class="{"bad" if limbo else "ok"}">{len(limbo)}</span>)</h2>',
            table("limbo", ["ledger", "bookie"], limbo, "no ledger is in limbo"),
        ]
        return "".join(parts)

    async def _under_replicated(self, store: MetadataStore, start: int) -> list[str]:
        """Their count and a page of them: a lost bookie may leave 10^5 marks."""
        count = await store.count_under_replicated()
        marks = await store.list_under_replicated(start=start, limit=MAX_ROWS + 1)
        page, more = marks[:MAX_ROWS], len(marks) > MAX_ROWS
        rows = [[str(u.ledger_id), esc(", ".join(sorted(u.bookies))), esc(time.ctime(u.since))] for u in page]
        shown = f", ledgers {page[0].ledger_id} to {page[-1].ledger_id} shown" if page and len(page) < count else ""
        return [
            f'<h2>Under-replicated ledgers (<span class="{"bad" if count else "ok"}">{count}</span>{esc(shown)})</h2>',
            table("under-replicated", ["ledger", "lost bookies", "since"], rows,
                  "nothing is under-replicated" if not count else f"none from id {start}"),
            _next_link("under-next", "under_from", str(page[-1].ledger_id + 1), f"next {MAX_ROWS} under-replicated ledgers")
            if more else "",
        ]

    async def _ledgers(self, store: MetadataStore, start: int) -> list[str]:
        ids = await store.list_ledgers(start=start, limit=MAX_ROWS + 1)
        page, more = ids[:MAX_ROWS], len(ids) > MAX_ROWS
        found = await _read_each(page, store.read_ledger)
        rows = [
            [
                str(md.ledger_id), esc(md.state.value), esc(md.ledger_type),
                f"{md.ensemble_size}/{md.write_quorum}/{md.ack_quorum}", str(md.last_entry_id), human_bytes(md.length),
                esc(", ".join(sorted(md.bookies()))),
            ]
            for md in (found[i] for i in page if i in found)
        ]
        shown = f"ids {page[0]} to {page[-1]}" if page else f"none from id {start}"
        return [
            f"<h2>Ledgers ({esc(shown)})</h2>",
            table("ledgers", ["ledger", "state", "type", "E/W/A", "last entry", "size", "bookies"], rows, "no ledgers"),
            _next_link("ledgers-next", "ledgers_from", str(page[-1] + 1), f"next {MAX_ROWS} ledgers") if more else "",
        ]

    async def _logs(self, store: MetadataStore, start: str) -> list[str]:
        # A page of names and their count: never every name (10^5 logs would travel whole).
        total = await store.count_logs()
        listed = await store.list_logs(start=start, limit=MAX_ROWS + 1)
        page, more = listed[:MAX_ROWS], len(listed) > MAX_ROWS

        async def read(name: str) -> LogMetadata:
            versioned = await store.read_log(name)
            return LogMetadata.deserialize(versioned.value, versioned.version)

        cursors: dict[str, str] = {}

        async def read_cursors() -> None:
            cursors.update(await self._cursors(page))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_cursors)
            found = await _read_each(page, read)
        # Older closed segments live in chunk records: the record's summary counts them.
        rows = [
            [
                esc(name), str(r.segment_count), human_bytes(r.length), _tier_cell(r), esc(r.writer or "(none)"),
                cursors.get(name, '<span class="bad">not read in time</span>'),
            ]
            for name, r in ((n, found[n]) for n in page if n in found)
        ]
        shown = f", {len(page)} shown" + (f" from {start!r}" if start else "") if total > len(page) else ""
        return [
            f"<h2>Logs ({total}{esc(shown)})</h2>",
            table("logs", ["log", "segments", "size (closed segments)", "tier", "writer", "cursors: lag, idle"], rows,
                  "no logs"),
            _next_link("logs-next", "logs_from", listed[MAX_ROWS], f"next {MAX_ROWS} logs") if more else "",
        ]

    async def _cursors(self, names: list[str]) -> dict[str, str]:
        """Each log's cursors as HTML: lag in entries, idle time, and whether it is expired
        (no longer holding retention back). Read at once for the page's logs, within
        CURSORS_TIMEOUT_S: a log not read by then is shown so."""
        client = self.admin.client
        if client is None:
            return {}
        out: dict[str, str] = {}
        limiter = trio.CapacityLimiter(CONCURRENT_READS)

        async def one(name: str) -> None:
            async with limiter:
                try:
                    infos = await client.logs.cursor_infos(name)
                except BKError as e:
                    out[name] = f'<span class="bad">{esc(e)}</span>'
                    return
            lines = []
            for c in infos:
                if c.cursor.subscription:
                    lines.append(await self._subscription(name, c.cursor.name))
                    continue
                lines.append(
                    f"{esc(c.cursor.name)}: lag {c.lag}, idle {c.idle_s:.0f} s"
                    + (f' <span class="bad">expired (TTL {c.ttl_s:g} s)</span>' if c.expired else "")
                )
            out[name] = "<br>".join(lines) or "(none)"

        with trio.move_on_after(CURSORS_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for name in names:
                    nursery.start_soon(one, name)
        return out

    async def _subscription(self, log_name: str, name: str) -> str:
        """A subscription as its owner tells it: backlog, in flight, redelivered, dead-lettered."""
        client = self.admin.client
        assert client is not None
        try:
            s = await client.logs.subscription_stats(log_name, name)
        except UnauthorizedError:
            return f"subscription {esc(name)}: (the log has a password: its owner does not tell)"
        except BKError as e:
            return f'subscription {esc(name)}: <span class="bad">{esc(e)}</span>'
        dead = f', <span class="bad">dead-lettered {s.dead_lettered}</span>' if s.dead_lettered else ""
        return (
            f"subscription {esc(name)}: backlog {s.backlog}, in flight {s.in_flight}, redelivered {s.redelivered}"
            f"{dead} (owner {esc(s.owner or '-')})"
        )

    async def _info(self, bookie_id: str, infos: dict[str, dict[str, Any] | str]) -> None:
        client = self.admin.client
        if client is None:
            infos[bookie_id] = "no client"
            return
        try:
            with trio.fail_after(INFO_TIMEOUT_S):
                infos[bookie_id] = await (await client.pool.get(bookie_id)).info(timeout_s=INFO_TIMEOUT_S)
        except trio.TooSlowError:
            infos[bookie_id] = f"no answer within {INFO_TIMEOUT_S:.0f} s"
        except Exception as e:  # noqa: BLE001 - whatever one bookie does, the page shows the others
            infos[bookie_id] = f"unreachable: {e}"

    def _rates(self, bookie_id: str, now: float, counters: dict[str, int], uptime_s: float) -> dict[str, float]:
        """Per second since this page was last shown (since the bookie started, the first time)."""
        keys = ("requests", "entries_added", "entries_read")
        last = self._last.get(bookie_id)
        self._last[bookie_id] = (now, dict(counters))
        if last is not None and now > last[0] and all(counters.get(k, 0) >= last[1].get(k, 0) for k in keys):
            dt = now - last[0]
            return {k: (counters.get(k, 0) - last[1].get(k, 0)) / dt for k in keys}
        return {k: counters.get(k, 0) / uptime_s if uptime_s > 0 else 0.0 for k in keys}


def _query_int(request: Request, name: str) -> int:
    """A non-negative integer query parameter; 0 when absent or not one."""
    try:
        return max(0, int(request.query_params.get(name, "0")))
    except ValueError:
        return 0


async def _read_each(keys: list[K], read: Callable[[K], Awaitable[V]]) -> dict[K, V]:
    """A page's records, ``CONCURRENT_READS`` at once; one that fails with a MetadataError
    (deleted since the listing, or a record the page cannot parse) is left out."""
    found: dict[K, V] = {}

    async def one(key: K) -> None:
        try:
            found[key] = await read(key)
        except MetadataError:
            pass

    await each_bounded(keys, CONCURRENT_READS, one)
    return found


def _next_link(link_id: str, param: str, value: str, text: str) -> str:
    href = "?" + urllib.parse.urlencode({param: value})
    return f'<p class="more"><a id="{link_id}" href="{esc(href)}">{esc(text)}</a></p>'


def _tier_cell(record: LogMetadata) -> str:
    """Where the log's closed segments go (its own tier, the tiers its offloads name, or the
    offload service's default) and how many of the segments its record holds are offloaded,
    and of those still on the bookies (older segments, in chunk records, are counted by
    ``bkframe log info``)."""
    settings = record.settings
    closed = [s for s in record.segments if s.closed and s.entries > 0]
    offloaded = [s.offload for s in closed if s.offload is not None]
    tiers = [settings.offload_tier] if settings.offload_tier else sorted({o.tier for o in offloaded})
    if tiers:
        where = ", ".join(esc(t) for t in tiers)
    elif settings.offload_after_s or settings.offload_beyond_bytes:
        where = "(the offload service's default)"
    else:
        return "-"
    if not offloaded:
        return where
    kept = sum(o.on_bookies for o in offloaded)
    older = " (older ones in chunk records not counted)" if record.chunks else ""
    return f"{where}: {len(offloaded)} of the last {len(closed)} closed segments offloaded, {kept} still on the bookies{older}"
