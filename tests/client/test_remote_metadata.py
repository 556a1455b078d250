"""The cluster on ZooKeeper and on etcd: bookies as processes, real servers."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

import bkframe
from bkframe.testing.kit import PASSWORD, payload
from tests.client.test_replicated_ledgers import _spawn_writer


@pytest.fixture(params=["zookeeper", "etcd"])
def remote_uri(request: pytest.FixtureRequest) -> str:
    root = f"c-{uuid.uuid4().hex[:12]}"
    if request.param == "zookeeper":
        return f"zk://{request.getfixturevalue('zk_server').address}/{root}"
    return f"etcd://{request.getfixturevalue('etcd_server').address}/{root}"


async def test_bookie_killed_then_writer_killed_and_recovered(cluster_factory: Any, remote_uri: str) -> None:
    cluster = cluster_factory(4, metadata=remote_uri)
    listed = subprocess.run(
        [sys.executable, "-m", "bkframe", "bookies", "list", "--metadata", remote_uri],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split("\n")
    assert sorted(line.split("\t")[0] for line in listed if line) == [f"bookie-{i}" for i in range(4)]
    assert all(line.endswith("\twritable") for line in listed if line)
    async with bkframe.open_client(remote_uri) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        victim = cluster.by_id(writer.metadata.fragments[0][1][0])
        pending = []
        for i in range(600):
            pending.append(writer.append_async(payload("entry", i)))
            if i == 200:
                victim.kill()
            if len(pending) > 32:
                await pending.pop(0).wait()
        for pa in pending:
            await pa.wait()
        md = await writer.close()
        assert md.last_entry_id == 599 and len(md.fragments) >= 2
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 599)] == [payload("entry", i) for i in range(600)]
    # A writer process killed mid-write; another client recovers its ledger.
    ledger_id, acked = await trio.to_thread.run_sync(lambda: _spawn_writer(remote_uri, 3, 3, 2, 300))
    async with bkframe.open_client(remote_uri) as client:
        reader = await client.open_ledger(ledger_id, password=PASSWORD, recovery=True)
        assert reader.lac >= max(acked)
        assert [e.payload for e in await reader.read(0, reader.lac)] == [payload("entry", i) for i in range(reader.lac + 1)]


def test_bookie_with_unreachable_metadata_names_the_uri(tmp_path: Path) -> None:
    uri = "zk://127.0.0.1:9/nowhere"
    proc = subprocess.run(
        [sys.executable, "-m", "bkframe", "bookie", "--data-dir", str(tmp_path), "--port", "0", "--metadata", uri],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    assert "listening on" not in proc.stdout
    assert uri in proc.stderr


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
async def test_metadata_server_restart(cluster_factory: Any, tmp_path: Path, kind: str) -> None:
    from bkframe.testing.servers import EtcdServer, ZooKeeperServer

    server = (ZooKeeperServer if kind == "zookeeper" else EtcdServer)(tmp_path / kind).start()
    uri = f"{'zk' if kind == 'zookeeper' else 'etcd'}://{server.address}/restart"
    try:
        cluster_factory(3, metadata=uri)
        async with bkframe.open_client(uri) as client:
            closed = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
            for i in range(50):
                await closed.append(payload("entry", i))
            await closed.close()
            reader = await client.open_ledger(closed.ledger_id, password=PASSWORD)
            writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
            for i in range(50):
                await writer.append(payload("entry", i))

            await trio.to_thread.run_sync(server.stop)
            # The metadata store is down: closed ledgers still read, open ledgers still append.
            with trio.fail_after(30):
                assert [e.payload for e in await reader.read(0, 49)] == [payload("entry", i) for i in range(50)]
                for i in range(50, 100):
                    await writer.append(payload("entry", i))

            await trio.to_thread.run_sync(server.start)
            # Back: bookies are registered again, metadata writes resume.
            with trio.fail_after(60):
                while len(await client.metadata.list_bookies()) < 3:
                    await trio.sleep(0.2)
                md = await writer.close()
                assert md.last_entry_id == 99
                fresh = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
                await fresh.append(b"after the restart")
                await fresh.close()
    finally:
        server.stop()
