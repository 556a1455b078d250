"""Autorecovery when its own parts die, and decommissioning under a live writer (real
bookie processes, real ``bkframe autorecovery`` processes)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

import bkframe
from bkframe import Client, LedgerMetadata
from bkframe.client.distribution import replicas
from bkframe.proto.codes import Status
from bkframe.testing.kit import PASSWORD, wait_until
from tests.autorecovery.test_autorecovery import autorecovery_config, metadata_uri, payload

__all__ = ["metadata_uri"]  # the fixture, shared with test_autorecovery

ENTRIES = 3000


class AutorecoveryProcess:
    """``bkframe autorecovery`` run alone, as an operator would."""

    def __init__(self, root: Path, metadata: str, holder: str, config: str) -> None:
        self.holder = holder
        self.log_path = root / f"{holder}.log"
        conf = root / f"{holder}.toml"
        conf.write_text(config)
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bkframe", "-v", "autorecovery", "--metadata", metadata,
                 "--config", str(conf), "--holder", holder],
                stdout=subprocess.DEVNULL, stderr=log,
            )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


def big_payload(ledger_id: int, entry_id: int) -> bytes:
    return payload(ledger_id, entry_id).ljust(2048, b".")


async def missing_replicas(client: Client, md: LedgerMetadata, skip: set[str]) -> list[str]:
    """Replicas named in ``md`` (but not in ``skip``) that lack an entry they should hold."""
    bad: list[str] = []
    bounds = [first for first, _ in md.fragments[1:]] + [md.last_entry_id + 1]
    for (first, ensemble), end in zip(md.fragments, bounds):
        for bookie_id in set(ensemble) - skip:
            conn = await client.pool.get(bookie_id)
            r = await conn.submit_list_entries(md.ledger_id, first, max(first, end - 1), timeout_s=10).wait()
            held = {i for a, b in r.runs for i in range(a, b + 1)} if r.status == Status.OK else set()
            want = [i for i in range(first, end) if bookie_id in replicas(ensemble, i, md.write_quorum)]
            if any(i not in held for i in want):
                bad.append(f"ledger {md.ledger_id} fragment {first}: {bookie_id} lacks entries")
    return bad


async def test_auditor_and_worker_killed_others_take_over(cluster_factory: Any, metadata_uri: str | None) -> None:
    """Bookies run no autorecovery; three ``bkframe autorecovery`` processes do. The
    auditor is killed before it marks anything, a worker is killed in the middle of a copy:
    the others finish, and metadata never names a replica that lacks entries."""
    cluster = cluster_factory(5, metadata=metadata_uri, config="[bookie]\nregistration_ttl_s = 2.0\n")
    config = autorecovery_config(lost_bookie_grace_s=3.0, lock_ttl_s=2.0, check_interval_s=0.2)
    services: list[AutorecoveryProcess] = []
    try:
        async with bkframe.open_client(cluster.metadata) as client:
            ledger_ids = []
            for _ in range(6):
                writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
                await writer.append_many([big_payload(writer.ledger_id, e) for e in range(ENTRIES)])
                await writer.close()
                ledger_ids.append(writer.ledger_id)
            for name in ("ar-a", "ar-b", "ar-c"):
                services.append(AutorecoveryProcess(cluster.root, cluster.metadata, name, config))
                if name == "ar-a":
                    with trio.fail_after(30):
                        while await client.metadata.lock_holder("auditor") != "ar-a":
                            await trio.sleep(0.1)
            mds = [await client.ledger_metadata(i) for i in ledger_ids]
            victim = max((b.bookie_id for b in cluster.bookies), key=lambda b: sum(b in md.bookies() for md in mds))
            proc = cluster.by_id(victim)
            proc.kill()
            shutil.rmtree(proc.data_dir)
            # Its registration ends: from now on the auditor's looks (every 0.2 s) see it
            # gone, and it is within its grace (3 s from the first such look): nothing marked yet.
            async def unregistered() -> bool:
                return victim not in {b.bookie_id for b in await client.metadata.list_bookies()}

            await wait_until(unregistered, "the killed bookie's registration to end", 30, every_s=0.1)
            assert await client.metadata.list_under_replicated() == []
            services[0].kill()
            with trio.fail_after(60):
                while (auditor := await client.metadata.lock_holder("auditor")) in (None, "ar-a"):
                    await trio.sleep(0.1)
            assert auditor in ("ar-b", "ar-c")
            # A worker in the middle of a copy: it holds a ledger's claim, the ledger still names the victim.
            killed = ""
            with trio.fail_after(60):
                while not killed:
                    for ledger_id in ledger_ids:
                        holder = await client.metadata.lock_holder(f"ledger/{ledger_id}")
                        if holder in ("ar-b", "ar-c"):
                            next(s for s in services if s.holder == holder).kill()
                            killed = holder
                            busy = await client.ledger_metadata(ledger_id)
                            break
                    await trio.sleep(0.01)
            assert victim in busy.bookies(), "the copy finished before the worker was killed; make the ledgers larger"
            for ledger_id in ledger_ids:
                bad = await missing_replicas(client, await client.ledger_metadata(ledger_id), {victim})
                assert not bad, bad
            with trio.fail_after(120):
                while any([victim in (await client.ledger_metadata(i)).bookies() for i in ledger_ids]):
                    await trio.sleep(0.5)
            for ledger_id in ledger_ids:
                md = await client.ledger_metadata(ledger_id)
                assert not await missing_replicas(client, md, set())
                handle = await client.open_ledger(ledger_id, password=PASSWORD)
                got = await handle.read(0, ENTRIES - 1)
                assert [e.payload for e in got] == [big_payload(ledger_id, e) for e in range(ENTRIES)]
            assert await client.metadata.list_under_replicated() == []
    finally:
        for s in services:
            if s.proc.poll() is None:
                s.kill()


async def test_decommission_under_a_live_writer(cluster_factory: Any, metadata_uri: str | None) -> None:
    """``bookies decommission`` of a bookie a live writer writes to: the writer keeps
    appending (it moves off the bookie, which refuses adds), the closed ledgers are copied
    away, and the command ends once nothing depends on the bookie."""
    cluster = cluster_factory(5, metadata=metadata_uri, config=autorecovery_config())
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        target = writer.metadata.fragments[0][1][0]
        closed = []
        for _ in range(4):
            w = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
            await w.append_many([payload(w.ledger_id, e) for e in range(50)])
            await w.close()
            closed.append(w.ledger_id)
        appended = [0]

        async def keep_appending() -> None:
            while True:
                await writer.append(payload(writer.ledger_id, appended[0]))
                appended[0] += 1
                await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_appending)
            await wait_until(lambda: appended[0] >= 10, "the writer under way", 30)
            before = appended[0]
            command = [sys.executable, "-m", "bkframe", "bookies", "decommission", target,
                       "--metadata", cluster.metadata, "--interval", "0.3"]
            done = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
            out = done.stdout.decode()
            assert done.returncode == 0, done.stderr.decode()
            assert "nothing depends on" in out, out
            at_end = appended[0]
            assert at_end > before  # it kept appending during the decommission ...
            await wait_until(lambda: appended[0] >= at_end + 10, "appends after the decommission", 30)  # ... and after
            nursery.cancel_scope.cancel()
        for ledger_id in [writer.ledger_id, *closed]:
            assert target not in (await client.ledger_metadata(ledger_id)).bookies()
        written = await writer.close()
        # (the append cancelled at the end may have been written too)
        assert target not in written.bookies() and written.last_entry_id + 1 >= appended[0]
        for ledger_id in [writer.ledger_id, *closed]:
            assert not await missing_replicas(client, await client.ledger_metadata(ledger_id), set())
        handle = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        got = await handle.read(0, written.last_entry_id)
        assert [e.payload for e in got] == [payload(writer.ledger_id, e) for e in range(written.last_entry_id + 1)]
