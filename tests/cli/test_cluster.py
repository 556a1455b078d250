"""A cluster is created on purpose (issue 26): ``bkframe cluster init|info``, and a bookie,
autorecovery or writing client refuses a metadata store that holds no cluster, or one of a
layout it does not know -- with one line naming the command that makes one, and nothing
stamped."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import trio

import bkframe
from bkframe import NoClusterError
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import ClusterRecord
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.cluster import BOOKIE_COMMAND, BookieProcess
from tests.cli.forked_cli import bkframe_text


def bk(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return bkframe_text(*args, timeout=timeout)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "ExceptionGroup" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


async def with_store(uri: str, fn: object) -> object:
    store = PluginManager().metadata_store(uri, create=True)
    try:
        return await fn(store)  # type: ignore[operator]
    finally:
        await store.aclose()


def test_a_bookie_refuses_a_store_that_is_no_cluster_and_stamps_nothing(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}"

    async def read_cluster(store: MetadataStore) -> ClusterRecord | None:
        return await store.read_cluster()

    assert trio.run(with_store, uri, read_cluster) is None  # the file exists now, but it is no cluster
    data_dir = tmp_path / "bookie"
    error = one_error_line(bk("bookie", "--data-dir", str(data_dir), "--port", "0", "--metadata", uri))
    assert f"no bkframe cluster in {uri}: create one with `bkframe cluster init --metadata {uri}`" in error
    assert "--init-cluster" in error
    assert not data_dir.exists()

    async def stamped(store: MetadataStore) -> tuple[object, list[object]]:
        return await store.read_cluster(), await store.list_bookies()

    assert trio.run(with_store, uri, stamped) == (None, [])
    # A typo in the URI: no new store, no new directory.
    typo = f"sqlite://{tmp_path / 'typo' / 'meta.db'}"
    error = one_error_line(bk("bookie", "--data-dir", str(data_dir), "--port", "0", "--metadata", typo))
    assert f"bkframe cluster init --metadata {typo}" in error
    assert not (tmp_path / "typo").exists() and not data_dir.exists()


def test_cluster_init_and_info_then_bookies_and_clients_start(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    assert "bkframe cluster init" in one_error_line(bk("cluster", "info", "--metadata", uri))
    created = bk("cluster", "init", "--metadata", uri)
    assert created.returncode == 0 and created.stdout.count("\n") == 1, created.stderr
    instance = created.stdout.split()[1]
    assert created.stdout == f"cluster {instance} created in {uri} (layout version 2)\n"
    again = bk("cluster", "init", "--metadata", uri)
    assert again.stdout == f"cluster {instance} already exists in {uri} (layout version 2)\n"
    info = json.loads(bk("cluster", "info", "--json", "--metadata", uri).stdout)
    assert info["instance_id"] == instance and info["layout_version"] == 2 and "secret" not in info

    async def secret(store: MetadataStore) -> bytes:
        record = await store.read_cluster()
        assert record is not None
        return record.secret

    hidden = trio.run(with_store, uri, secret)
    assert isinstance(hidden, bytes)
    shown = bk("cluster", "info", "--metadata", uri).stdout
    assert instance in shown and hidden.hex() not in shown and "secret" not in shown
    bookie = BookieProcess(tmp_path / "b", metadata=uri, command=BOOKIE_COMMAND, init_cluster=False).start()
    try:
        assert bookie.address
    finally:
        assert bookie.stop() == 0


def test_bookie_init_cluster_flag_makes_one(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'new' / 'meta.db'}"
    bookie = BookieProcess(tmp_path / "b", metadata=uri, command=BOOKIE_COMMAND, init_cluster=True).start()
    try:
        info = json.loads(bk("cluster", "info", "--json", "--metadata", uri).stdout)
        assert info["layout_version"] == 2
    finally:
        assert bookie.stop() == 0


def test_a_layout_this_bkframe_does_not_know_is_refused(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    future = ClusterRecord(99, "f" * 32, 0.0, b"s" * 32)
    assert trio.run(with_store, uri, lambda store: store.init_cluster(future))
    data_dir = tmp_path / "bookie"
    bookie = ["bookie", "--data-dir", str(data_dir), "--port", "0"]
    for args in (bookie, [*bookie, "--init-cluster"], ["cluster", "init"]):
        error = one_error_line(bk(*args, "--metadata", uri))
        assert "has metadata layout version 99; this bkframe knows layout version 2 only" in error, error
    assert not data_dir.exists()


async def test_a_writing_client_and_autorecovery_name_the_missing_cluster(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    await with_store(uri, lambda store: store.list_ledgers())
    async with bkframe.open_client(uri) as client:
        with pytest.raises(NoClusterError, match=r"bkframe cluster init --metadata"):
            await client.create_ledger()
    proc = await trio.to_thread.run_sync(lambda: bk("autorecovery", "--metadata", uri))
    assert f"no bkframe cluster in {uri}" in one_error_line(proc)
