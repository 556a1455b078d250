"""The blocking facade's ledger handles on a real cluster: the twins of what the async
handles do (tests/client/test_api_parity.py checks that the names and signatures match)."""

from __future__ import annotations

from typing import Any

import pytest

import bkframe
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import PASSWORD

#: Bookies whose journal holds a group up to 1.5 s before its fsync, so that "not yet
#: synced" lasts long enough to observe (as in tests/client/test_vd_journal.py).
SLOW_SYNC = """
[journal]
plugin = "journal_fs"
flush_when_queue_empty = false
max_wait_ms = 1500.0
buffered_bytes_threshold = 104857600
"""


def test_a_blocking_vd_journal_writer_syncs(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=SLOW_SYNC)
    with bkframe.connect(cluster.metadata) as bk:
        writer = bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=PASSWORD)
        assert writer.append(b"vd-0") == 0  # with the master key, synced before the ack
        assert writer.append_many([b"vd-%d" % i for i in range(1, 5)]) == [1, 2, 3, 4]
        assert writer.lap == 4 and writer.lac <= 0  # acknowledged, not synced yet
        assert writer.sync() == 4
        assert writer.lac == 4 and writer.length == 20
        assert writer.write_lac() == 4
        reader = bk.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        assert reader.read_lac() == 4
        assert [e.payload for e in reader.read(0, 4)] == [b"vd-%d" % i for i in range(5)]
        assert writer.close().last_entry_id == 4


@pytest.mark.parametrize("loop", ["trio", "asyncio"])
def test_blocking_ledger_handles(shared_cluster: Cluster, loop: str) -> None:
    cluster = shared_cluster
    with bkframe.connect(cluster.metadata, loop=loop) as bk:
        assert bk.settings.add_timeout_s > 0 and bk.client_id == bk.client.client_id
        unclaimed = bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD, claim=False)
        writer = bk.open_writer(unclaimed.ledger_id, password=PASSWORD)
        assert writer.metadata.writer == bk.client_id
        writer.append_many([b"a", b"b", b"c"])
        writer.flush()
        assert writer.write_lac() == 2  # the batch carried the LAC from before it
        reader = bk.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        assert not reader.closed and reader.ledger_id == writer.ledger_id and reader.lac == 2
        writer.append(b"d")
        writer.write_lac()
        assert reader.wait_for_lac(2, timeout_s=5.0) == 3
        with reader.tail(0, idle_timeout_s=1.0) as tail:
            assert [e.payload for e in tail] == [b"a", b"b", b"c", b"d"]
        writer.close()
        assert reader.refresh().closed and reader.closed
        assert [e.payload for e in reader.tail(0)] == [b"a", b"b", b"c", b"d"]  # a closed ledger's tail ends
