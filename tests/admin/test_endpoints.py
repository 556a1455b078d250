"""Each admin endpoint on a real bookie process, bad input included."""

from __future__ import annotations

from pathlib import Path

import bkframe
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.cluster import BookieProcess
from tests.admin.helpers import fetch, fetch_json, sample


async def test_every_endpoint_of_a_bookie_process(tmp_path: Path, bookie_processes: list[BookieProcess]) -> None:
    meta = f"sqlite://{tmp_path / 'metadata.db'}"
    b = BookieProcess(tmp_path / "b0", bookie_id="b0", metadata=meta, args=("--http-port", "0"))
    bookie_processes.append(b)
    b.start()
    url = b.http_url
    assert url.startswith("http://127.0.0.1:"), url

    assert await fetch(url + "/heartbeat") == (200, "OK\n")
    status, info = await fetch_json(url + "/api/v1/bookie/info")
    assert status == 200 and info["bookie_id"] == "b0" and info["read_only"] is False

    async with bkframe.open_client(meta) as client:
        w = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"secret-pw")
        await w.append_many([b"x" * 10] * 5)
        await w.close()
        ledger_id = w.ledger_id
        kept = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=b"pw")
        await kept.append(b"y")
        await kept.close()

        both = sorted([ledger_id, kept.ledger_id])
        status, listed = await fetch_json(url + "/api/v1/ledger/list")
        assert status == 200 and listed == {"ledgers": both, "on_this_bookie": both, "next": None}
        # Paged: a page of one, a cursor to the next, until none is left.
        pages = []
        query = "?limit=1"
        while True:
            status, listed = await fetch_json(url + "/api/v1/ledger/list" + query)
            assert status == 200
            pages.append(listed["ledgers"])
            if listed["next"] is None:
                break
            query = f"?limit=1&start={listed['next']}"
        assert pages == [[both[0]], [both[1]], []]
        for query in ("?limit=0", "?limit=10001", "?start=-1", "?start=abc"):
            status, err = await fetch_json(url + "/api/v1/ledger/list" + query)
            assert status == 400 and "give an integer" in err["error"], (query, err)
        status, md = await fetch_json(f"{url}/api/v1/ledger/metadata?ledger_id={ledger_id}")
        assert status == 200
        assert (md["state"], md["last_entry_id"], md["length"], md["ensemble_size"]) == ("CLOSED", 4, 50, 1)
        assert "password_hash" not in md

        # Bad input: clear 4xx errors.
        for query, code, words in [
            ("", 400, "missing query parameter ledger_id"),
            ("?ledger_id=abc", 400, "is not a ledger id"),
            ("?ledger_id=-3", 400, "is not a ledger id"),
            ("?ledger_id=987654", 404, "no ledger 987654"),
        ]:
            status, err = await fetch_json(url + "/api/v1/ledger/metadata" + query)
            assert status == code and words in err["error"], (query, status, err)
        assert (await fetch(url + "/api/v1/no/such/thing"))[0] == 404
        assert (await fetch(url + "/heartbeat", method="DELETE"))[0] == 405

        # GC on demand: a ledger deleted from the store goes from this bookie at once.
        await client.delete_ledger(ledger_id)
        status, gc = await fetch_json(url + "/api/v1/bookie/gc", method="POST")
        assert status == 200 and gc["ledgers_deleted"] == 1, gc
        status, listed = await fetch_json(url + "/api/v1/ledger/list")
        assert listed["on_this_bookie"] == [kept.ledger_id]
        status, gc = await fetch_json(url + "/api/v1/bookie/gc")
        assert status == 200 and gc["gc_ledgers_deleted"] == 1

    status, state = await fetch_json(url + "/api/v1/bookie/state")
    assert status == 200 and state["state"] == "writable" and state["decommissioned"] is False
    store = PluginManager().metadata_store(meta)
    try:
        await store.set_decommissioned("b0", True)
    finally:
        await store.aclose()
    status, state = await fetch_json(url + "/api/v1/bookie/state")
    assert status == 200 and state["state"] == "draining" and state["decommissioned"] is True

    status, config = await fetch_json(url + "/api/v1/config/server_config")
    assert status == 200 and config["bookie"]["bookie_id"] == "b0" and config["http"]["enabled"] is True
    assert config["journal"]["plugin"] == "journal_fs"
    assert "secret-pw" not in str(config)

    status, metrics = await fetch(url + "/metrics")
    assert status == 200
    assert sample(metrics, "bkframe_bookie_entries_added_total") == 6
    assert sample(metrics, "bkframe_bookie_gc_ledgers_deleted_total") == 1
    assert sample(metrics, "bkframe_bookie_ledgers", state="all") == 1
    assert sample(metrics, "bkframe_bookie_read_only") == 0

    # The status page answers on the same port.
    status, page = await fetch(url + "/")
    assert status == 200 and "<td>b0</td>" in page and f"<td>{kept.ledger_id}</td>" in page

    # With its admin service (and the status page's client) running, the bookie still stops cleanly.
    assert b.stop(timeout_s=30) == 0


def test_a_ledger_page_covers_one_id_range_of_the_store_and_the_bookie() -> None:
    from bkframe.admin.http import ledger_page

    # Neither list full: the last page.
    assert ledger_page([1, 5], [5, 9], 3) == ([1, 5], [5, 9], None)
    # The bookie holds ledgers the store no longer has (garbage): the page ends where the
    # first full list ends, and the ids after it are the next page's.
    assert ledger_page([1, 5, 7], [2, 3, 4], 3) == ([1], [2, 3, 4], 5)
    assert ledger_page([1, 2, 3], [3, 8, 9], 3) == ([1, 2, 3], [3], 4)


def test_redact_masks_secret_keys() -> None:
    from bkframe.admin.http import redact

    assert redact({"auth": {"token": "abc", "tokens_file": "/x", "plugin": "token"}, "port": 1}) == {
        "auth": {"token": "***", "tokens_file": "***", "plugin": "token"}, "port": 1,
    }
