"""The etcd store's listings read keys only, in pages; ids come in blocks in one request.
(A store of an older layout is refused at start: the contract's
``test_a_cluster_of_another_layout_is_refused``.)"""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from bkframe_metadata_etcd import kv
from bkframe_metadata_etcd.store import EtcdMetadataStore

from bkframe.core.interfaces.metadata_store import iter_ledger_ids
from bkframe.core.metadata import LedgerMetadata
from bkframe.testing.servers import EtcdServer


@pytest.fixture
def uri(etcd_server: EtcdServer) -> str:
    return f"etcd://{etcd_server.address}/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def store(uri: str) -> AsyncIterator[EtcdMetadataStore]:
    s = EtcdMetadataStore(uri)
    yield s
    await s.aclose()


def record_requests(store: EtcdMetadataStore) -> list[tuple[str, dict[str, Any]]]:
    """Every request the store's client sends from now on: (path, JSON body)."""
    sent: list[tuple[str, dict[str, Any]]] = []
    client = store._clients[0]
    post = client.post

    def recorded(url: str, *args: Any, json: Any = None, **kwargs: Any) -> Any:
        sent.append((url.rsplit("/v3", 1)[-1], json if json is not None else {}))
        return post(url, *args, json=json, **kwargs)

    client.post = recorded  # type: ignore[method-assign]
    return sent


async def test_listings_read_keys_only_in_pages_and_windows(
    store: EtcdMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing ledgers, a bookie's ledgers and logs asks etcd for keys only, with a limit,
    from the key of ``start``: no metadata travels, and no response holds more than a page.
    Ids are asked in windows that end at the largest id handed out (etcd counts every key
    of the range it is asked, whatever the limit), and one range above it."""
    monkeypatch.setattr(kv, "PAGE", 7)
    await store.new_ledger_ids(2_000)  # the largest id handed out: 2_000
    ids = [3, 9, 10, 99, *range(1_000, 1_020), 10**15 + 1]  # the last one above it
    for ledger_id in ids:
        await store.create_ledger(LedgerMetadata(ledger_id, 2, 2, 1, ((0, ("b-1", f"b-{2 + ledger_id % 2}")),)))
    await store.create_log("a-log", b"{}")
    sent = record_requests(store)

    def ranges() -> tuple[int, int]:
        """How many windows and ranges above the largest id the listing asked (reads of the
        id counter aside), each checked."""
        windows = above = 0
        for path, body in sent:
            assert path == "/kv/range"
            key = base64.b64decode(body["key"])
            if key.endswith(b"/idgen"):
                assert "range_end" not in body  # one key
                continue
            assert body["keys_only"] and body["limit"] <= 7
            if int(key[-19:]) > 2_000:
                above += 1  # to the prefix's end: only keys above the largest id are counted
                continue
            end = base64.b64decode(body["range_end"])
            assert end <= key[:-19] + b"%019d" % 2_001, (key, end)  # a window, not the rest of the prefix
            windows += 1
        sent.clear()
        return windows, above

    assert await store.list_ledgers() == ids
    windows, above = ranges()
    assert windows >= 4 and above == 1
    assert await store.list_ledgers(start=10, limit=3) == [10, 99, 1_000]
    assert ranges()[1] == 0  # the page was full below the largest id
    assert [page async for page in iter_ledger_ids(store, start=1_015, page=5)] == [[*range(1_015, 1_020)], [10**15 + 1]]
    ranges()
    assert await store.ledgers_of_bookie("b-3", start=10) == [99, *range(1_001, 1_020, 2), 10**15 + 1]
    assert ranges()[1] == 1
    assert await store.list_logs() == ["a-log"]
    assert all(body.get("keys_only") for path, body in sent if path == "/kv/range")


async def test_ids_come_in_blocks_in_one_request(store: EtcdMetadataStore, uri: str) -> None:
    """A block of ids is one transaction while no other client took ids since; after one
    did, a transaction that reads the counter in its failure branch, then one that takes."""
    first = await store.new_ledger_ids(100)
    sent = record_requests(store)
    assert await store.new_ledger_ids(1_000) == range(first.stop, first.stop + 1_000)
    assert [path for path, _ in sent] == ["/kv/txn"]
    other = EtcdMetadataStore(uri)
    try:
        taken = await other.new_ledger_ids(5)
    finally:
        await other.aclose()
    sent.clear()
    assert await store.new_ledger_ids(10) == range(taken.stop, taken.stop + 10)
    assert await store.new_ledger_id() == taken.stop + 10
    assert [path for path, _ in sent] == ["/kv/txn"] * 3
