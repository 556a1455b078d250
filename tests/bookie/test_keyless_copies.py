"""Keyless copies (autorecovery's recovery adds with an empty master key: it knows only the
key's hash) on one bookie with a metadata store: taken only from the cluster's own
processes (AUTH bkframe-internal with the cluster secret), stored where the bookie holds no
key for the ledger, batch after batch; the writer's key is adopted later once the metadata
vouches for it; taken where the bookie holds the key too."""

from __future__ import annotations

from pathlib import Path

from bkframe import LedgerMetadata
from bkframe.client.bookies.connection import connect_bookie
from bkframe.core.interfaces.auth import internal_credential
from bkframe.core.ledger_keys import master_key, password_hash
from bkframe.core.plugin_manager import PluginManager
from bkframe.proto.codes import Status
from bkframe.testing.cluster import make_config, running_bookie
from bkframe.testing.kit import PASSWORD


async def test_keyless_copies_then_the_writers_key(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    async with running_bookie(make_config(tmp_path / "bookie", metadata=uri)) as (_, host, port):
        store = PluginManager().metadata_store(uri)
        try:
            md = LedgerMetadata(
                ledger_id=7, ensemble_size=1, write_quorum=1, ack_quorum=1, fragments=((0, ("b",)),),
                password_hash=password_hash(PASSWORD),
            )
            await store.create_ledger(md)
            async with connect_bookie(host, port) as stranger:
                # Not the cluster's own: no keyless copy, and nothing is made for the ledger.
                r = await stranger.submit_add_batch(7, [0], [b"e0"], master_key=b"", recovery=True).wait()
                assert r.status == Status.UNAUTHORIZED and "bkframe-internal" in r.message
                assert (await stranger.read_lac(7)).status == Status.NO_LEDGER
            cluster = await store.read_cluster()
            assert cluster is not None
            async with connect_bookie(host, port, auth=internal_credential(cluster.secret)) as bk:
                for first in (0, 2):  # two batches: the second finds the ledger keyless here
                    r = await bk.submit_add_batch(
                        7, [first, first + 1], [b"e%d" % first, b"e%d" % (first + 1)], master_key=b"", recovery=True
                    ).wait()
                    assert r.status == Status.OK, r.message
                assert (await bk.read(7, 3)).data == b"e3"
                # Without the recovery flag an empty key is no copy: the metadata does not vouch for it.
                plain = await bk.add(7, 4, b"x", master_key=b"")
                assert plain.status == Status.UNAUTHORIZED
                wrong = await bk.add(7, 4, b"x", master_key=master_key(b"other"))
                assert wrong.status == Status.UNAUTHORIZED
                right = await bk.add(7, 4, b"e4", master_key=master_key(PASSWORD))
                assert right.status == Status.OK, right.message
                # Now the bookie holds the key: a keyless copy still goes in (autorecovery
                # copying another fragment of the ledger here), and the key stays.
                late = await bk.submit_add_batch(7, [5], [b"e5"], master_key=b"", recovery=True).wait()
                assert late.status == Status.OK, late.message
                assert (await bk.read(7, 5, master_key=master_key(PASSWORD))).data == b"e5"
                assert (await bk.add(7, 6, b"x", master_key=b"")).status == Status.UNAUTHORIZED
            async with connect_bookie(host, port) as stranger:
                # A stranger cannot slip a keyless copy behind a keyed add in one run of adds.
                keyed = stranger.submit_add(7, 6, b"e6", master_key=master_key(PASSWORD))
                copy = stranger.submit_add(7, 7, b"forged", master_key=b"", recovery=True)
                assert (await keyed.wait()).status == Status.OK
                assert (await copy.wait()).status == Status.UNAUTHORIZED
        finally:
            await store.aclose()
