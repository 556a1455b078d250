"""Named logs through the blocking facade: what a Spark task or a script uses."""

from __future__ import annotations

import threading
import uuid

import bkframe
from bkframe import Position
from bkframe.testing.cluster import Cluster


def test_blocking_write_commit_read_and_tail(shared_cluster: Cluster) -> None:
    uri = shared_cluster.metadata
    name = f"sync-{uuid.uuid4().hex[:8]}"  # the cluster is shared: a log of this test's own
    with bkframe.connect(uri) as bk:
        bk.logs.create(name, rollover_entries=10)
        with bk.logs.open_writer(name) as writer:
            positions = writer.append_many([b"x%d" % i for i in range(25)])
        assert positions[:2] == [Position(0, 0), Position(0, 1)] and positions[10] == Position(1, 0)
        # A bulk load: a closed ledger committed once under its token.
        ledger = bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        ledger.append_many([b"bulk-%d" % i for i in range(5)])
        ledger.close()
        first = bk.logs.commit_ledgers(name, [ledger.ledger_id], "load-1")
        assert bk.logs.commit_ledgers(name, [ledger.ledger_id], "load-1") == first
        reader = bk.logs.reader(name)
        assert reader.end() == Position(first.segments[0], 5)
        with reader.tail("earliest", idle_timeout_s=1.0) as tail:
            assert [e.payload for e in tail] == [b"x%d" % i for i in range(25)] + [b"bulk-%d" % i for i in range(5)]
        parts = reader.snapshot()
        assert sum(p.entries for p in parts) == 30
        assert [e.payload for e in reader.read_segment(parts[1].segment, 0, 1)] == [b"x10", b"x11"]

        # A plain-iterator tail follows a writer in another thread across rollovers.
        def write_more() -> None:
            with bkframe.connect(uri) as other, other.logs.open_writer(name) as w:
                for i in range(30):
                    w.append(b"more-%d" % i)

        thread = threading.Thread(target=write_more)
        start = reader.end()
        tail = reader.tail(start)
        thread.start()
        got = [next(tail).payload for _ in range(30)]
        tail.close()
        thread.join()
        assert got == [b"more-%d" % i for i in range(30)]

        # The other twins of the async reader and writer.
        chunks = list(reader.chunks(end=start))  # a chunk per segment (rollover_entries=10) at most
        assert [e.payload for chunk in chunks for e in chunk] == [e.payload for e in reader.read(end=start)]
        assert reader.refresh().name == reader.name == name and reader.metadata.segments
        with bk.logs.open_writer(name) as writer:
            assert writer.name == name and writer.settings.rollover_entries == 10 and writer.epoch >= 1
            writer.append(b"last")
            writer.flush()
            assert writer.segment >= 0 and writer.metadata.writer == writer.writer_id
        assert bk.logs.client is bk
