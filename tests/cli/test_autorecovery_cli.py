"""``bkframe autorecovery status`` and ``bkframe bookies decommission --no-wait / --undo``
on a sqlite store (the commands with bookies at work: tests/autorecovery)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import trio

from bkframe import LedgerMetadata
from bkframe.core.plugin_manager import PluginManager
from tests.cli.forked_cli import bkframe_text


def bk(*args: str) -> subprocess.CompletedProcess[str]:
    return bkframe_text(*args)


def test_status_and_decommission(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"

    async def prepare() -> None:
        store = PluginManager().metadata_store(uri, create=True)
        try:
            for ledger_id, ensemble in ((1, ("b1", "b2")), (2, ("b2", "b3")), (3, ("b3", "b4"))):
                md = LedgerMetadata(
                    ledger_id=ledger_id, ensemble_size=2, write_quorum=2, ack_quorum=1, fragments=((0, ensemble),)
                )
                await store.create_ledger(md)
            await store.mark_under_replicated(1, ["b1"])
            await store.mark_under_replicated(3, ["b4"])
            async with trio.open_nursery() as nursery:
                lock = await store.try_lock("auditor", "bookie-9", 30.0, nursery)
                assert lock is not None
                claim = await store.try_lock("ledger/3", "bookie-7", 30.0, nursery)
                assert claim is not None
                status = await trio.to_thread.run_sync(
                    lambda: bk("autorecovery", "status", "--metadata", uri, "--limit", "1", "--json")
                )
                later = await trio.to_thread.run_sync(lambda: bk("autorecovery", "status", "--metadata", uri, "--from", "2"))
                nursery.cancel_scope.cancel()
        finally:
            await store.aclose()
        assert status.returncode == 0, status.stderr
        got = json.loads(status.stdout)
        assert got["auditor"] == "bookie-9"
        # A page of the marks (--limit), their count, and where the next page starts.
        [mark] = got["under_replicated"]
        assert (mark["ledger_id"], mark["lost_bookies"], mark["worker"]) == (1, ["b1"], None)
        assert mark["age_s"] >= 0
        assert (got["under_replicated_count"], got["under_replicated_next"]) == (2, 2)
        assert later.returncode == 0, later.stderr
        assert "under-replicated ledgers: 2 (1 shown, ledgers 3 to 3)" in later.stdout, later.stdout
        assert re.search(r"ledger 3: lost b4; marked \d+ s ago, replicated by bookie-7\n", later.stdout), later.stdout
        assert "more: --from" not in later.stdout

    trio.run(prepare)
    marked = bk("bookies", "decommission", "b2", "--metadata", uri, "--no-wait")
    assert marked.returncode == 0 and "b2 is decommissioned" in marked.stdout, marked.stderr
    status = bk("autorecovery", "status", "--metadata", uri)
    assert "decommissioned: b2 (2 ledger(s) still use it)" in status.stdout, status.stdout
    undone = bk("bookies", "decommission", "b2", "--metadata", uri, "--undo")
    assert undone.returncode == 0
    assert json.loads(bk("autorecovery", "status", "--metadata", uri, "--json").stdout)["decommissioned"] == []
