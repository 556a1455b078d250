"""Placement on real bookie processes: rack-aware ensembles and ensemble changes, too few
racks, read-only bookies never chosen, least-used spreading, and the client's placement options."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
import trio

import bkframe
from bkframe import ConfigError, PluginError
from bkframe.core.config import NoConfig
from bkframe.core.interfaces.placement import Candidate, PlacementError, racks_spanned
from bkframe.core.metadata import BookieInfo
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.registry import ComponentRegistry
from bkframe.testing.kit import FAST, PASSWORD, wait_until

RACKS = ("rack-a", "rack-b", "rack-c")


async def racks_of(client: Any) -> dict[str, str]:
    return {b.bookie_id: b.rack for b in await client.metadata.list_bookies()}


async def test_rack_aware_write_sets_span_racks_and_ensemble_changes_keep_it(
    cluster_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = cluster_factory(6, racks=RACKS)  # bookie-i is in RACKS[i % 3]
    listed = subprocess.run(
        [sys.executable, "-m", "bkframe", "bookies", "list", "--json", "--metadata", cluster.metadata],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    assert {d["id"]: d["rack"] for d in map(json.loads, listed.splitlines())} == {
        f"bookie-{i}": RACKS[i % 3] for i in range(6)
    }
    listed = subprocess.run(
        [sys.executable, "-m", "bkframe", "bookies", "list", "--metadata", cluster.metadata],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    assert [line.split("\t")[2:] for line in listed.splitlines()] == [["writable", RACKS[i % 3]] for i in range(6)]
    async with bkframe.open_client(cluster.metadata, placement="rack_aware", min_racks=3, **FAST) as client:
        racks = await racks_of(client)
        for e, w in [(3, 3), (4, 2), (5, 2), (6, 3)]:
            for _ in range(5):
                writer = await client.create_ledger(ensemble=e, write_quorum=w, ack_quorum=2, password=PASSWORD)
                ensemble = writer.metadata.fragments[0][1]
                # min_racks = 3 asks for every rack in a write set of 3, and 2 racks in one of 2.
                assert racks_spanned([racks[b] for b in ensemble], w) == min(3, w), (e, w, ensemble)
                await writer.close()

        # A live writer loses a bookie: its replacement is the bookie of the same rack (the
        # only one that keeps every write set on three racks; a random choice: one in three).
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        for i in range(10):
            await writer.append(b"before-%d" % i)
        victim = writer.metadata.fragments[0][1][0]
        cluster.by_id(victim).kill()
        with trio.fail_after(60):
            for i in range(10):
                await writer.append(b"after-%d" % i)
        fragments = writer.metadata.fragments
        assert len(fragments) == 2 and victim not in fragments[1][1]
        assert racks_spanned([racks[b] for b in fragments[1][1]], 3) == 3, fragments
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 19)][-1] == b"after-9"

        # E = W = 4 cannot span 4 racks with 3: a warning, and the most racks there are...
        with caplog.at_level(logging.WARNING, logger="bkframe.placement"):
            writer = await client.create_ledger(ensemble=4, write_quorum=4, ack_quorum=2, password=PASSWORD)
        assert "no choice gives every write set 3 racks" not in caplog.text
        await writer.close()
    async with bkframe.open_client(cluster.metadata, placement="rack_aware", min_racks=4) as client:
        with caplog.at_level(logging.WARNING, logger="bkframe.placement"):
            writer = await client.create_ledger(ensemble=4, write_quorum=4, ack_quorum=2, password=PASSWORD)
        assert "no choice gives every write set 4 racks" in caplog.text
        assert racks_spanned([racks[b] for b in writer.metadata.fragments[0][1]], 4) == 3
        await writer.close()
    # ...or, with enforce_min_racks, a clear refusal.
    async with bkframe.open_client(cluster.metadata, placement="rack_aware", min_racks=4, enforce_min_racks=True) as client:
        with pytest.raises(PlacementError, match=r"no choice gives every write set 4 racks .* span 3 rack\(s\)"):
            await client.create_ledger(ensemble=4, write_quorum=4, ack_quorum=2, password=PASSWORD)


class ExtraFirst:
    """A broken policy: "extra" first, whether it is a candidate or not."""

    wants_load = False

    def new_ensemble(self, candidates: Sequence[Candidate], *, ensemble_size: int, write_quorum: int) -> list[str]:
        return ["extra", *sorted(c.bookie_id for c in candidates)][:ensemble_size]

    def replacements(
        self, candidates: Sequence[Candidate], *, ensemble: Sequence[Candidate], failed: Sequence[int], write_quorum: int
    ) -> dict[int, str]:
        raise AssertionError("not called")


class ExtraFirstPlugin:
    @bkframe.hookimpl
    def bkframe_register_components(self, registry: ComponentRegistry) -> None:
        registry.add_placement_policy("extra_first", lambda options: ExtraFirst(), config=NoConfig)


async def test_read_only_bookies_are_never_chosen(cluster_factory: Any) -> None:
    cluster = cluster_factory(4)
    store = PluginManager().metadata_store(cluster.metadata)
    # One more registered bookie, "extra", served by bookie-3's process.
    address = cluster.by_id("bookie-3").address
    max_age = 0.5  # the client's cached listing of the bookies (bookie_set_max_age_s)
    async with trio.open_nursery() as nursery:
        async with bkframe.open_client(cluster.metadata, bookie_set_max_age_s=max_age, **FAST) as client:
            writer = await client.create_ledger(ensemble=4, write_quorum=2, ack_quorum=2, password=PASSWORD)
            await writer.close()  # the client has listed the bookies: "extra" registers after
            registration = await store.register_bookie(BookieInfo("extra", address), ttl_s=6, nursery=nursery)
            await wait_until(lambda: _writable_in_view(client, "extra"), "the client's listing to show extra writable", 30)
            # Registered since, writable, it is chosen (so the test below can fail)...
            chosen: set[str] = set()
            for _ in range(20):
                writer = await client.create_ledger(ensemble=4, write_quorum=2, ack_quorum=2, password=PASSWORD)
                chosen.update(writer.metadata.fragments[0][1])
                await writer.close()
            assert "extra" in chosen
            # ...read-only (as a bookie with a full disk registers), never, once the
            # client's listing is as new as the change.
            await registration.set_read_only(True)
            await wait_until(lambda: _not_writable_in_view(client, "extra"), "the client's listing to show extra read-only", 30)
            for _ in range(20):
                writer = await client.create_ledger(ensemble=4, write_quorum=2, ack_quorum=2, password=PASSWORD)
                assert sorted(writer.metadata.fragments[0][1]) == [f"bookie-{i}" for i in range(4)]
                await writer.close()
            # Nor as a replacement in an ensemble change, where the only other choice is bookie-3.
            for _ in range(50):
                writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
                ensemble = writer.metadata.fragments[0][1]
                if "bookie-3" not in ensemble:
                    break
                await writer.close()
            assert "bookie-3" not in ensemble
            await writer.append(b"first")
            cluster.by_id(ensemble[0]).kill()
            with trio.fail_after(60):
                for i in range(5):  # entries whose write set holds index 0
                    await writer.append(b"more-%d" % i)
            assert len(writer.metadata.fragments) == 2
            assert writer.metadata.fragments[1][1] == ("bookie-3", *ensemble[1:])
            await writer.close()
        # No policy can break the rule: one that picks the read-only bookie is an error of its plugin.
        plugins = PluginManager(load_entry_points=False, extra_plugins=[ExtraFirstPlugin()])
        async with bkframe.open_client(cluster.metadata, plugins=plugins, placement="extra_first") as client:
            with pytest.raises(PluginError, match=r"placement policy ExtraFirst chose \['extra', 'bookie-0'\]: it must"):
                await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
        await registration.aclose()
    await store.aclose()


async def test_placement_options_are_checked_before_anything_starts(tmp_path: Any) -> None:
    uri = f"sqlite://{tmp_path / 'never.db'}"
    with pytest.raises(ConfigError, match=r"placement policy 'rack_aware': unknown key\(s\) min_rack.*or a setting: "):
        async with bkframe.open_client(uri, placement="rack_aware", min_rack=2):
            pass
    with pytest.raises(ConfigError, match="placement policy 'nearest': no installed plugin provides it"):
        async with bkframe.open_client(uri, placement="nearest"):
            pass
    assert not (tmp_path / "never.db").exists()


async def test_least_used_spreads_ledgers_evenly(cluster_factory: Any) -> None:
    cluster = cluster_factory(4)
    async with bkframe.open_client(cluster.metadata, placement="least_used") as client:
        placed: list[str] = []
        for i in range(8):
            writer = await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
            await writer.append(b"%d" % i)
            placed.extend(writer.metadata.fragments[0][1])
            await writer.close()
        # Each bookie holds as many as the others (random placement: rarely so).
        assert sorted(Counter(placed).values()) == [4, 4, 4, 4], Counter(placed)
        conn = await client.pool.get("bookie-0")
        assert (await conn.info())["ledgers"] == 4
        # A bookie that does not answer GET_BOOKIE_INFO is not chosen, and is quarantined so
        # that the next choices do not wait for it again.
        hung = cluster.by_id("bookie-3")
        hung.hang()
        client.pool.ledger_counts.clear()  # as when they are LOAD_TTL_S old: asked again
        for _ in range(3):
            writer = await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
            assert "bookie-3" not in writer.metadata.fragments[0][1]
            await writer.close()
        assert client.pool.health.quarantined("bookie-3")
        hung.resume()


@pytest.mark.parametrize("server", ["zk_server", "etcd_server", None])
async def test_the_rack_label_survives_every_metadata_store(server: str | None, request: Any, tmp_path: Any) -> None:
    if server == "zk_server":
        uri = f"zk://{request.getfixturevalue(server).address}/racks-{tmp_path.name}"
    elif server == "etcd_server":
        uri = f"etcd://{request.getfixturevalue(server).address}/racks-{tmp_path.name}"
    else:
        uri = f"sqlite://{tmp_path / 'meta.db'}"
    store = PluginManager().metadata_store(uri, create=True)
    async with trio.open_nursery() as nursery:
        registration = await store.register_bookie(BookieInfo("b1", "127.0.0.1:1", rack="rack-a"), ttl_s=6, nursery=nursery)
        await registration.set_read_only(True)
        assert [(b.bookie_id, b.rack, b.read_only) for b in await store.list_bookies()] == [("b1", "rack-a", True)]
        await registration.aclose()
    await store.aclose()


async def _writable_in_view(client: bkframe.Client, bookie_id: str) -> bool:
    """Whether the client's listing of the bookies (the one placement uses) has it writable."""
    return bookie_id in {b.bookie_id for b in (await client.pool.bookies.view()).writable}


async def _not_writable_in_view(client: bkframe.Client, bookie_id: str) -> bool:
    return not await _writable_in_view(client, bookie_id)
