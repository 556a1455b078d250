"""Bookies re-replicate over TLS: a bookie whose disk was replaced refills every ledger from
its peers (BP-46 limbo repair) when every bookie serves TLS only, requires client
certificates and token authentication -- its own client presents its certificate and
authenticates as the cluster's own (``bkframe-internal``, with the cluster secret), which
every bookie accepts whatever its provider."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import bkframe
from bkframe.core.ledger_keys import master_key
from bkframe.proto.codes import Status
from bkframe.testing.kit import PASSWORD
from tests.autorecovery.test_bypass_journal import crash_payload, info, wait_out_of_limbo
from tests.core.test_security import Certs, secure_config


async def test_a_replaced_disk_is_refilled_over_tls(cluster_factory: Any, tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    certs = Certs(tmp_path / "certs")
    extra = "\n[journal]\nplugin = \"journal_fs\"\npreallocate_bytes = 0\n"
    cluster = cluster_factory(3, config=secure_config(certs, extra=extra))
    # The test's client uses a token; the repairing bookie's client is the cluster's own.
    async with bkframe.open_client(cluster.metadata, **certs.client(token="another-token")) as client:
        ledgers = {}
        for ledger_type, count in (("BYPASS_JOURNAL", 40), ("PD_JOURNAL", 25)):
            writer = await client.create_ledger(
                ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=ledger_type, password=PASSWORD
            )
            for i in range(count):
                await writer.append(crash_payload(writer.ledger_id, i))
            await writer.close()
            ledgers[writer.ledger_id] = count
        lost = cluster.bookies[1]
        lost.kill()
        shutil.rmtree(lost.data_dir)
        lost.start(*cluster.bookie_args)
        final = await wait_out_of_limbo(client, lost.bookie_id)
        assert final["repair"]["repaired_ledgers"] == 2, final["repair"]
        assert final["repair"]["entries_copied"] == sum(ledgers.values()), final["repair"]
        conn = await client.pool.get(lost.bookie_id)
        for ledger, count in ledgers.items():
            for i in range(count):
                r = await conn.read(ledger, i, master_key=master_key(PASSWORD))
                assert (r.status, r.data[-len(crash_payload(ledger, i)) :]) == (Status.OK, crash_payload(ledger, i))
        assert (await info(client, lost.bookie_id))["limbo_ledgers"] == []
    # The peers saw the repairing bookie authenticate as the cluster's own over TLS.
    peers_log = "".join(b.log() for b in cluster.bookies if b is not lost)
    assert "authenticated as bkframe-internal" in peers_log
    assert "refused" not in lost.log(), lost.log()
