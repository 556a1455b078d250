"""Recovery through a bookie whose filesystem another process filled to 100 % (issue 45), on
a real small tmpfs and a real small ext4 image: for PD, VD and BYPASS ledgers whose writer
was killed, with a second bookie of the ensemble hung, then in limbo (BP-46, after its own
unclean restart); then the full bookie killed and restarted while still full; then space
given back (the tmpfs grown, the ext4's other file removed), and the bookie writable again
by itself.

Without the reserved space (docs/reliability.md, "On a full disk") the full bookie could not
journal a fence or a recovery add, and E3 W3 A2 recovery, which needs two of the three
bookies for both, stalled for good. The small bookie's journal preallocates nothing, so that
every journal write needs a new block, as on a disk that filled between two preallocations.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import trio

import bkframe
from bkframe.testing.cluster import BookieProcess
from bkframe.testing.faults.small_fs import SmallFilesystem
from bkframe.testing.kit import FAST, PASSWORD, payload, wait_until
from tests.bookie.dying_writer import SIZE
from tests.bookie.test_disk_full import SMALL, info, registered_read_only

MB = 1 << 20
FS_SIZE = 16 * MB
TYPES = ["PD_JOURNAL", "VD_JOURNAL", "BYPASS_JOURNAL"]
#: Acknowledged appends each ledger gets before its writer is killed.
ACKED = 100
REPO = Path(__file__).resolve().parents[2]


def small_config(path: Path) -> Path:
    """The full bookie: a disk check every 3 s (a full disk is found by the write that
    fails, not by the check; the check finds the space that returns), the default reserve
    (capped at 2.5 % of the 16 MiB filesystem), no journal preallocation."""
    path.write_text(
        """
[bookie]
disk_check_interval_s = 3.0

[journal]
preallocate_bytes = 0
"""
    )
    return path


def run_writer_until_acked(metadata: str, types: list[str]) -> dict[int, tuple[str, int]]:
    """Start the dying writer on one ledger per type in ``types``, SIGKILL it once every
    ledger has ``ACKED`` acknowledged appends; return ``{ledger_id: (type, last acked)}``.
    Blocking (run it in a thread)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bookie.dying_writer", metadata, *types],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    ledgers: dict[int, str] = {}
    acked: dict[int, int] = defaultdict(lambda: -1)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            kind, *rest = line.split()
            if kind == "ledger":
                ledgers[int(rest[1])] = rest[0]
            elif kind == "acked":
                acked[int(rest[0])] = max(acked[int(rest[0])], int(rest[1]))
                if len(ledgers) == len(types) and all(acked[lid] >= ACKED for lid in ledgers):
                    break
        else:
            raise AssertionError(f"the writer exited ({proc.wait()}) before every ledger had {ACKED} acks")
        proc.send_signal(signal.SIGKILL)
        # What it printed before it died counts too: those appends were acknowledged.
        for line in proc.stdout:
            kind, *rest = line.split()
            if kind == "acked":
                acked[int(rest[0])] = max(acked[int(rest[0])], int(rest[1]))
    finally:
        proc.kill()
        proc.wait(timeout=30)
    return {lid: (ledger_type, acked[lid]) for lid, ledger_type in ledgers.items()}


async def recover_and_check(client: bkframe.Client, ledgers: dict[int, tuple[str, int]]) -> None:
    """Recover (open with recovery) each ledger: it closes, and holds every acknowledged
    entry, each read back byte for byte."""
    for ledger_id, (ledger_type, last_acked) in ledgers.items():
        with trio.fail_after(120):
            reader = await client.open_ledger(ledger_id, password=PASSWORD)
        md = await client.ledger_metadata(ledger_id)
        assert md.closed, (ledger_type, ledger_id, md.state)
        assert md.last_entry_id >= last_acked, (ledger_type, ledger_id, md.last_entry_id, last_acked)
        entries = await reader.read(0, md.last_entry_id)
        assert [e.payload for e in entries] == [payload(ledger_id, i, size=SIZE) for i in range(md.last_entry_id + 1)]


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
async def test_a_full_bookie_fences_recovers_restarts_and_comes_back(
    kind: str, cluster_factory: Any, small_filesystem: Any, tmp_path: Path
) -> None:
    fs: SmallFilesystem = small_filesystem(kind, tmp_path / "small-fs", FS_SIZE)
    cluster = cluster_factory(2)
    config = small_config(tmp_path / "small.toml")
    # Its log outside the full filesystem, where the test can read all of it.
    small = BookieProcess(fs.path / "data", bookie_id=SMALL, metadata=cluster.metadata, log_path=tmp_path / "small.log")
    small.start("--config", str(config))
    cluster.bookies.append(small)  # killed with the cluster
    hung = cluster.by_id("bookie-1")
    # Sets of ledgers: one of each type recovered while a bookie is hung; a BYPASS one while
    # a bookie is in limbo (BP-46, after its unclean restart); one of each type after the
    # full bookie's own unclean restart.
    written = await trio.to_thread.run_sync(run_writer_until_acked, cluster.metadata, [*TYPES, *TYPES, "BYPASS_JOURNAL"])
    ledgers = list(written.items())
    first, second, in_limbo = dict(ledgers[:3]), dict(ledgers[3:6]), dict(ledgers[6:])

    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        assert (await info(client, SMALL))["reserved_space_bytes"] > 0
        # Someone else's file takes every free block.
        await trio.to_thread.run_sync(fs.fill)
        hung.hang()
        try:
            await recover_and_check(client, first)
        finally:
            hung.resume()
        state = await info(client, SMALL)
        assert state["read_only"] is True, state
        assert state["counters"]["duties_served_again"] >= 1, state["counters"]

        # The other bookie killed and restarted: its BYPASS ledgers are in limbo (it may have
        # lost their unsynced entries), so it answers no explicit negative for them. Recovery
        # (this client's, or the limbo repair's own) ends them through the full bookie.
        await trio.to_thread.run_sync(hung.kill)
        cluster.spawn(hung)
        await trio.to_thread.run_sync(hung.wait_started)
        await recover_and_check(client, in_limbo)
        assert "fenced and put in limbo" in hung.log()
        await wait_until(lambda: _no_limbo(client, hung.bookie_id), "the restarted bookie's limbo repaired")

        # Killed and restarted on the full disk: it starts (read-only) and its ledgers still
        # recover through it (in limbo after the unclean stop, fenced at boot).
        await trio.to_thread.run_sync(small.kill)
        await trio.to_thread.run_sync(lambda: small.start("--config", str(config)))
        await wait_until(lambda: _read_only(client, True), "the restarted full bookie registered read-only")
        await recover_and_check(client, second)

        # Space comes back: writable again without a restart, said once, the reserve taken
        # back; a W = A = 3 ledger (every bookie must take adds) is written and read.
        if kind == "tmpfs":
            fs.resize(2 * FS_SIZE)  # the filesystem grown, the other file still there
        else:
            fs.free()  # the other file removed
        await wait_until(lambda: _read_only(client, False), "the bookie writable again after space returned", 60)
        log = small.log()
        assert log.count("bookie is writable again") == 1, log
        assert (await info(client, SMALL))["reserved_space_bytes"] > 0
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=PASSWORD)
        for i in range(20):
            await writer.append(payload("after", i))
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 19)] == [payload("after", i) for i in range(20)]


async def _no_limbo(client: bkframe.Client, bookie_id: str) -> bool:
    return not (await info(client, bookie_id))["limbo_ledgers"]


async def _read_only(client: bkframe.Client, wanted: bool) -> bool:
    return await registered_read_only(client, SMALL) is wanted
