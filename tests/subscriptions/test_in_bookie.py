"""A bookie's own adds (its subscription owners' state-ledger appends) skip the socket but are
served as a connection's: the same journal record and answer, a fenced ledger refusing them."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import bkframe
from bkframe.bookie.access import Access
from bkframe.errors import LedgerFencedError
from bkframe.subscriptions.in_bookie import InBookieAdds
from bkframe.testing.cluster import make_config, running_bookie


async def test_a_bookies_own_adds_are_durable_readable_and_refused_once_fenced(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    async with running_bookie(make_config(tmp_path / "b0", metadata=uri)) as (service, _, _):
        bookie = service.bookie
        assert bookie is not None
        async with bkframe.open_client(uri) as bk, trio.open_nursery() as nursery:
            adds = InBookieAdds(bookie.requests, Access("test"), bookie.ready)
            await nursery.start(adds.run)
            bk.pool.in_process[bookie.bookie_id] = adds
            writer = await bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, ledger_type="PD_JOURNAL", password=b"pw")
            for i in range(3):
                await writer.append(b"e%d" % i)
            await writer.append_many([b"e3", b"e4"])
            assert adds.served == 4  # in this process, not by the socket
            # Opened with recovery by another client: fenced on the bookie, by the socket.
            async with bkframe.open_client(uri) as other:
                reader = await other.open_ledger(writer.ledger_id, password=b"pw", recovery=True)
                assert reader.lac == 4
                assert [e.payload for e in await reader.read(0, 4)] == [b"e%d" % i for i in range(5)]
            with pytest.raises(LedgerFencedError):
                await writer.append(b"too late")
            assert adds.served == 5
            adds.close()
            assert bk.pool.adds_to(bookie.bookie_id) is not adds  # closed: the socket again
            nursery.cancel_scope.cancel()
