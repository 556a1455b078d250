"""A slow metadata store does not stop writes (issue 35, item 4): the bookie's side, on a real
in-process bookie whose key checks read a real sqlite store held up in a worker thread (as a
store client failing over from a cut member is: cancelling does not stop it).

- A client that understands TRY_AGAIN gets it within the bookie's ``key_check_wait_s`` for
  the first add or fence of a ledger the bookie does not hold, nothing is made meanwhile, and
  the same request sent again once the store answered is served (one read, shared).
- A client of protocol version 1 (no FEATURES) never sees the new status: it waits, as before.
- The client library retries TRY_AGAIN on the same bookie: a writer whose add timeout is far
  below the store's delay appends the first time, and recovery fences likewise.
- A new client on a bookie older than FEATURES (one that does not know op 12) works as before.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

import bkframe
from bkframe.bookie.key_check import KeyCheck
from bkframe.client.bookies.connection import connect_bookie
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.ledger_keys import master_key
from bkframe.core.metadata import LedgerMetadata
from bkframe.proto import table
from bkframe.proto.codes import LAST_ENTRY, Feature, Op, Status
from bkframe.proto.ops.connection_setup import encode_features
from bkframe.testing.cluster import make_config, running_bookie
from bkframe.testing.kit import PASSWORD, wait_until

#: How long the store takes to answer a ledger read, and how long the bookie waits for it.
DELAY_S = 1.5
WAIT_S = 0.3


class SlowReads:
    """The bookie's metadata store, each ledger read held ``DELAY_S`` in a worker thread."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.uri = store.uri
        self.reads: list[int] = []
        self.answered = 0

    async def read_ledger(self, ledger_id: int) -> LedgerMetadata:
        self.reads.append(ledger_id)
        await trio.to_thread.run_sync(time.sleep, DELAY_S)
        try:
            return await self.store.read_ledger(ledger_id)
        finally:
            self.answered += 1


async def test_a_slow_key_check_is_answered_try_again_and_the_client_retries_on_the_same_bookie(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    key = master_key(PASSWORD)
    async with running_bookie(make_config(tmp_path / "bookie", metadata=uri)) as (service, host, port):
        bookie = service.bookie
        assert bookie is not None and service.store is not None
        slow = SlowReads(service.store)
        async with bkframe.open_client(uri, add_timeout_s=0.5, read_timeout_s=0.5) as client, trio.open_nursery() as reads:
            bookie.key_check = KeyCheck(slow, nursery=reads, wait_s=WAIT_S)  # type: ignore[arg-type]
            ids = [
                (await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)).ledger_id
                for _ in range(4)
            ]
            added, fenced, old_client, recovered = ids

            # The wire: TRY_AGAIN within the wait, nothing made; the same requests once the
            # store answered: served, from the one read each.
            async with connect_bookie(host, port, try_again_s=0) as conn:
                assert conn.features == Feature.TRY_AGAIN
                add = conn.submit_add(added, 0, b"entry 0", master_key=key)
                fence = conn.submit_read(fenced, LAST_ENTRY, master_key=key, fence=True)
                first = [await add.wait(), await fence.wait()]
                assert [r.status for r in first] == [Status.TRY_AGAIN] * 2, first
                assert slow.answered == 0  # before the store answered
                assert bookie.storage.ledger_state(added) is None and bookie.storage.ledger_state(fenced) is None
                assert bookie.counters.key_checks_pending == 2
                await wait_until(lambda: slow.answered >= 2, "the store's answers", DELAY_S + 30)
                assert (await conn.add(added, 0, b"entry 0", master_key=key)).status == Status.OK
                again = await conn.read(fenced, LAST_ENTRY, master_key=key, fence=True)
                assert again.status == Status.NO_ENTRY and bookie.storage.ledger_state(fenced).fenced  # type: ignore[union-attr]
                assert sorted(slow.reads) == sorted([added, fenced])

            # At once (the three wait for the store side by side): a client that sent no
            # FEATURES (protocol version 1) waits for the store, as before; the client
            # library's first append of a new ledger outlasts its 0.5 s add timeout three times
            # over, on the same (only) bookie, and so does a recovery's fence.
            async def old_client_add() -> None:
                async with connect_bookie(host, port, features=0, try_again_s=0) as conn:  # a TRY_AGAIN would show
                    assert conn.features == 0
                    started = trio.current_time()
                    r = await conn.add(old_client, 0, b"entry 0", master_key=key)
                    assert r.status == Status.OK and trio.current_time() - started >= DELAY_S - 0.1, r

            async def recover() -> None:
                reader = await client.open_ledger(recovered, password=PASSWORD, recovery=True)
                assert reader.lac == -1 and bookie.storage.ledger_state(recovered).fenced  # type: ignore[union-attr]

            handle = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(old_client_add)
                nursery.start_soon(recover)
                started = trio.current_time()
                assert await handle.append(b"first") == 0
                assert trio.current_time() - started >= DELAY_S - 0.1
            counters = client.context.counters
            assert counters.tries_again >= 2 and counters.ensemble_changes == 0, counters
            await handle.close()
            reads.cancel_scope.cancel()


async def test_a_bookie_older_than_features_still_serves_a_new_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bookie of protocol version 1 does not know op 12: it answers FEATURES BAD_REQUEST and
    serves the rest; the client reads both answers, uses no feature, and works as before. A
    FEATURES anywhere but right after an AUTH that starts a frame changes nothing."""
    async with running_bookie(make_config(tmp_path / "bookie")) as (service, host, port):
        assert service.bookie is not None
        monkeypatch.delitem(table._REQUEST_DECODERS, Op.FEATURES)  # a bookie older than FEATURES
        async with connect_bookie(host, port) as old:
            assert old.features == 0
            assert (await old.add(1, 0, b"entry", master_key=b"k")).status == Status.OK
        assert service.bookie.counters.bad_requests == 1
        monkeypatch.undo()
        async with connect_bookie(host, port, features=0) as conn:
            late = await conn.submit(table.FEATURES, lambda rid: encode_features(rid, Feature.TRY_AGAIN)).wait()
            assert late.status == Status.BAD_REQUEST and "FEATURES" in late.message
