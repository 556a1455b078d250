"""The status page shows ledgers and logs a page at a time, with a link to the next page,
whatever the store holds (the page itself is tested in a browser in test_sandbox_admin)."""

from __future__ import annotations

import re

from bkframe.admin.status import MAX_ROWS, StatusPage
from bkframe.bench.scale_metadata import Admin
from bkframe.core.metadata import LedgerMetadata
from bkframe.core.plugin_manager import PluginManager


def ids_in(table_html: str, table_id: str) -> list[str]:
    body = table_html.split(f'<table id="{table_id}">', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr><td>([^<]*)</td>", body)


async def test_ledgers_and_logs_are_shown_a_page_at_a_time() -> None:
    store = PluginManager().metadata_store("memory://")
    count = MAX_ROWS * 2 + 50
    for ledger_id in (await store.new_ledger_ids(count)):
        md = LedgerMetadata(ledger_id=ledger_id, ensemble_size=1, write_quorum=1, ack_quorum=1, fragments=((0, ("b1",)),))
        await store.create_ledger(md)
    names = [f"log-{i:04d}" for i in range(MAX_ROWS + 10)]
    for name in names:
        await store.create_log(name, b"{}")  # a record the page cannot parse: skipped, not fatal
    page = StatusPage(Admin(store))

    seen: list[str] = []
    start = 0
    while True:
        body = await page.cluster(store, ledgers_from=start)
        seen += ids_in(body, "ledgers")
        link = re.search(r'<a id="ledgers-next" href="\?ledgers_from=(\d+)">', body)
        if link is None:
            break
        start = int(link.group(1))
    assert seen == [str(i) for i in range(1, count + 1)]

    body = await page.cluster(store)
    assert f"<h2>Logs ({len(names)}, {MAX_ROWS} shown)</h2>" in body
    link = re.search(r'<a id="logs-next" href="\?logs_from=([^"]+)">', body)
    assert link is not None and link.group(1) == names[MAX_ROWS]
    body = await page.cluster(store, logs_from=names[MAX_ROWS])
    assert f"<h2>Logs ({len(names)}, 10 shown from &#x27;{names[MAX_ROWS]}&#x27;)</h2>" in body
    assert 'id="logs-next"' not in body
    await store.aclose()


async def test_under_replicated_ledgers_are_counted_and_shown_a_page_at_a_time() -> None:
    store = PluginManager().metadata_store("memory://")
    count = MAX_ROWS + 30
    await store.mark_many_under_replicated(range(1, count + 1), ["gone-bookie"])
    page = StatusPage(Admin(store))

    body = await page.cluster(store)
    assert f'<span class="bad">{count}</span>, ledgers 1 to {MAX_ROWS} shown)</h2>' in body
    assert ids_in(body, "under-replicated") == [str(i) for i in range(1, MAX_ROWS + 1)]
    link = re.search(r'<a id="under-next" href="\?under_from=(\d+)">', body)
    assert link is not None and link.group(1) == str(MAX_ROWS + 1)
    body = await page.cluster(store, under_from=int(link.group(1)))
    assert ids_in(body, "under-replicated") == [str(i) for i in range(MAX_ROWS + 1, count + 1)]
    assert 'id="under-next"' not in body
    await store.aclose()
