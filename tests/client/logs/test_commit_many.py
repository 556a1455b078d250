"""Committing to several logs at once (``Logs.commit_many``) on real bookies (the shared
sqlite cluster; the store contract runs ``update_logs`` on ZooKeeper and etcd): all the logs
or none, once per token, retried whole when a record moved, never half visible to readers."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio

import bkframe
from bkframe import Logs, Position
from bkframe.core.interfaces.metadata_store import LogChange, MetadataStore, MultiLogStore
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import PASSWORD, payload


def _names(*logs: str) -> list[str]:
    """Log names of this test's own (the cluster is shared by the session)."""
    run = uuid.uuid4().hex[:8]
    return [f"{log}-{run}" for log in logs]


async def _ledger(client: bkframe.Client, label: str, count: int, *, password: bytes = PASSWORD) -> int:
    """A closed one-copy ledger of ``count`` records (``payload(label, i)``)."""
    handle = await client.create_ledger(
        ensemble=1, write_quorum=1, ack_quorum=1, ledger_type="VD_JOURNAL", password=password, custom=bkframe.ENVELOPE_CUSTOM
    )
    for i in range(count):
        handle.append_async(bkframe.encode_record(bkframe.Record(payload(label, i))))
    await handle.close()
    return handle.ledger_id


async def _payloads(logs: Logs, name: str) -> list[bytes]:
    return [e.payload for e in await (await logs.reader(name, password=PASSWORD)).read()]


async def _gone(client: bkframe.Client, ledger_id: int) -> bool:
    try:
        await client.ledger_metadata(ledger_id)
    except bkframe.NoSuchLedgerError:
        return True
    return False


class _Store:
    """The client's store, with ``update_logs`` wrapped by ``around`` (or taken away)."""

    def __init__(self, inner: MetadataStore, around: Callable[..., Awaitable[list[int]]] | None) -> None:
        self._inner = inner
        self._around = around
        self.batches = 0

    def __getattr__(self, name: str) -> Any:
        if name == "update_logs":
            if self._around is None:
                raise AttributeError(name)  # a third party's store, without it
            return self._update_logs
        return getattr(self._inner, name)

    async def _update_logs(self, changes: Sequence[LogChange]) -> list[int]:
        self.batches += 1
        assert self._around is not None
        return await self._around(self._inner, changes, self.batches)


class _Client:
    """``client`` with another metadata store: what ``Logs`` is made on in these tests."""

    def __init__(self, client: bkframe.Client, store: _Store) -> None:
        self._client = client
        self.metadata = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


async def test_a_commit_to_three_logs_lands_in_all_once_and_deletes_what_it_left_out(shared_cluster: Cluster) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        a, b, c, d = _names("a", "b", "c", "d")
        for name in (a, b, c, d):
            await logs.create(name, password=PASSWORD)
        # A Spark write: each task stages the ledger it writes per log, under the batch's
        # token; a failed attempt's ledger (left out of the commit) is staged too.
        ledgers = {a: [await _ledger(client, "a", 3), await _ledger(client, "a2", 2)], b: [await _ledger(client, "b", 4)],
                   c: [await _ledger(client, "c", 1), await _ledger(client, "empty", 0)]}
        failed = {name: await _ledger(client, f"failed-{name}", 2) for name in (a, b, c)}
        for name in (a, b, c):
            for ledger_id in [*ledgers[name], failed[name]]:
                assert await logs.stage_ledger(name, ledger_id, "batch-1", group="run-1", password=PASSWORD)
        results = await logs.commit_many(ledgers, "batch-1", password=PASSWORD)
        assert {n: r.segments for n, r in results.items()} == {a: (0, 1), b: (0,), c: (0,)}
        assert not any(r.replayed for r in results.values())
        assert await _payloads(logs, a) == [payload("a", i) for i in range(3)] + [payload("a2", i) for i in range(2)]
        assert await _payloads(logs, b) == [payload("b", i) for i in range(4)]
        assert await _payloads(logs, c) == [payload("c", 0)]
        for name in (a, b, c):
            md = await logs.metadata(name)
            assert md.staged == () and md.garbage == ()
            assert await _gone(client, failed[name])
        assert await _gone(client, ledgers[c][1])  # the empty ledger became no segment
        # Retried (the driver did not see the answer): nothing changes, the first results come back.
        versions = [(await logs.metadata(n)).version for n in (a, b, c)]
        again = await logs.commit_many(ledgers, "batch-1", password=PASSWORD)
        assert again == results and all(r.replayed for r in again.values())
        assert [(await logs.metadata(n)).version for n in (a, b, c)] == versions
        # The token in some of a commit's logs only: not a replay, not a new commit.
        with pytest.raises(bkframe.CommitError, match=rf"committed in log\(s\) \['{a}'\] but not in \['{d}'\]"):
            await logs.commit_many({a: [], d: [await _ledger(client, "d", 1)]}, "batch-1", password=PASSWORD)
        assert (await logs.metadata(d)).segments == ()
        # An abort of a write to several logs: each log's staged ledgers of the group go.
        aborted = {name: await _ledger(client, f"aborted-{name}", 1) for name in (a, b)}
        for name, ledger_id in aborted.items():
            assert await logs.stage_ledger(name, ledger_id, "batch-2", group="run-2", password=PASSWORD)
        assert await logs.discard_staged_many([a, b], "run-2", password={a: PASSWORD, b: PASSWORD}) == {
            a: [aborted[a]], b: [aborted[b]],
        }
        assert all([await _gone(client, i) for i in aborted.values()])
        assert not await logs.stage_ledger(b, await _ledger(client, "late", 1), "batch-2", group="run-2", password=PASSWORD)


async def test_a_commit_that_cannot_land_in_one_log_changes_none(shared_cluster: Cluster) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        x, y, z = _names("x", "y", "z")
        for name in (x, y, z):
            await logs.create(name, password=PASSWORD)
        await logs.commit_ledgers(x, [await _ledger(client, "in-x", 1)], "earlier", password=PASSWORD)
        before = [await logs.metadata(n) for n in (x, y, z)]
        good = {x: [await _ledger(client, "x", 2)], y: [await _ledger(client, "y", 2)]}
        still_open = await client.create_ledger(password=PASSWORD)
        await still_open.append(b"open")
        other_password = await _ledger(client, "other", 1, password=b"other")
        cases = [
            ({**good, z: [still_open.ledger_id]}, "only closed ledgers can be committed"),
            ({**good, z: [other_password]}, "has another password than the log"),
            ({**good, z: [good[x][0]]}, f"ledger {good[x][0]} is listed for logs '{x}' and '{z}'"),
            ({**good, z: [before[0].segments[0].ledger_id]}, f"are in log '{x}'"),
        ]
        for commit, error in cases:
            with pytest.raises(bkframe.CommitError, match=error):
                await logs.commit_many(commit, "bad", password=PASSWORD)
        with pytest.raises(ValueError, match=rf"no password for log\(s\) \['{y}'\]"):
            await logs.commit_many(good, "bad", password={x: PASSWORD})
        # A store without update_logs (a third party's): a clear error before any change;
        # one log at a time still works on it.
        bare = Logs(_Client(client, _Store(client.metadata, None)))
        with pytest.raises(bkframe.UnsupportedError, match="cannot change several logs in one step"):
            await bare.commit_many(good, "bad", password=PASSWORD)
        assert [await logs.metadata(n) for n in (x, y, z)] == before
        assert (await bare.commit_many({y: good[y]}, "one", password=PASSWORD))[y].segments == (0,)


async def test_a_record_that_moved_between_read_and_write_retries_the_whole_commit(shared_cluster: Cluster) -> None:
    """Another client commits to one of the logs after this commit read the records and
    before it stores them: the batch fails whole, is made again from the new records, and
    lands once in every log -- after the other commit, which is kept. The log that moved
    keeps few segments per chunk record, so the retry numbers segments a chunk could hold."""
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        p, q, r = _names("p", "q", "r")
        for name in (p, r):
            await logs.create(name, password=PASSWORD)
        await logs.create(q, password=PASSWORD, segments_per_chunk=2)
        ours = {p: [await _ledger(client, "p", 2)], q: [await _ledger(client, f"q{i}", 1) for i in range(5)],
                r: [await _ledger(client, "r", 3)]}
        theirs = await _ledger(client, "theirs", 2)

        async def conflict(store: MetadataStore, changes: Sequence[LogChange], batch: int) -> list[int]:
            if batch == 1:
                await logs.commit_ledgers(q, [theirs], "theirs", password=PASSWORD)
            assert isinstance(store, MultiLogStore)
            return await store.update_logs(changes)

        store = _Store(client.metadata, conflict)
        results = await Logs(_Client(client, store)).commit_many(ours, "ours", password=PASSWORD)
        assert store.batches == 2
        assert {n: res.segments for n, res in results.items()} == {p: (0,), q: (1, 2, 3, 4, 5), r: (0,)}
        assert await _payloads(logs, p) == [payload("p", i) for i in range(2)]
        assert await _payloads(logs, r) == [payload("r", i) for i in range(3)]
        expected_q = [payload("theirs", 0), payload("theirs", 1)] + [payload(f"q{i}", 0) for i in range(5)]
        assert await _payloads(logs, q) == expected_q
        # The next change moves q's oldest segments to chunk records: read back the same.
        await logs.commit_ledgers(q, [await _ledger(client, "after", 1)], "after", password=PASSWORD)
        assert (await logs.metadata(q)).chunks
        assert await _payloads(logs, q) == [*expected_q, payload("after", 0)]


async def test_readers_never_see_one_log_committed_without_the_other(shared_cluster: Cluster) -> None:
    """Two clients commit batches to two logs while a reader polls both ends: whichever log
    it reads first, the other -- read after it -- shows at least as many commits."""
    rounds = 10
    async with bkframe.open_client(shared_cluster.metadata) as client, bkframe.open_client(shared_cluster.metadata) as other:
        m, n = _names("m", "n")
        for name in (m, n):
            await client.logs.create(name, password=PASSWORD)
        batches = [{m: [await _ledger(client, f"m{k}", 1)], n: [await _ledger(client, f"n{k}", 1)]} for k in range(2 * rounds)]
        seen: set[tuple[Position, Position]] = set()
        done = trio.Event()

        async def commit(committer: bkframe.Client, first: int) -> None:
            for k in range(first, len(batches), 2):
                await committer.logs.commit_many(batches[k], f"t-{k}", password=PASSWORD)

        async def read() -> None:
            readers = {name: await client.logs.reader(name, password=PASSWORD) for name in (m, n)}
            while not done.is_set():
                for one, two in ((m, n), (n, m)):
                    ends = {one: await readers[one].end()}
                    ends[two] = await readers[two].end()
                    assert ends[one] <= ends[two], f"{two} lags {one}: {ends}"
                    seen.add((ends[m], ends[n]))

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                async with trio.open_nursery() as committers:
                    committers.start_soon(commit, client, 0)
                    committers.start_soon(commit, other, 1)
                done.set()
        assert len(seen) >= 3, seen  # the reader saw the logs grow, not only before and after
        assert len(await _payloads(client.logs, m)) == len(await _payloads(client.logs, n)) == 2 * rounds


def test_the_blocking_twins_commit_and_discard_across_logs(shared_cluster: Cluster) -> None:
    s, t = _names("s", "t")
    with bkframe.connect(shared_cluster.metadata) as bk:
        for name in (s, t):
            bk.logs.create(name)
        ledgers = {}
        for name in (s, t):
            handle = bk.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1)
            handle.append_many([name.encode()])
            handle.close()
            ledgers[name] = (handle.ledger_id,)
        results = bk.logs.commit_many(ledgers, "sync")
        assert {name: r.segments for name, r in results.items()} == {s: (0,), t: (0,)}
        assert [e.payload for e in bk.logs.reader(t).read()] == [t.encode()]
        assert bk.logs.discard_staged_many([s, t], "never-staged") == {s: [], t: []}
