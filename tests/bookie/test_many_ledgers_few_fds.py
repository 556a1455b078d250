"""A bookie holds many times more ledgers than it may open files (a small ``ulimit -n``),
restarts after a SIGKILL, and reads every entry back; no request is answered IO_ERROR.

Per-ledger entry logs are the hard case: every ledger has a log of its own, on top of its
index (it took 3 fds per ledger before the open-file caches).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bkframe.client.bookies.connection import connect_bookie
from bkframe.proto.codes import Status
from bkframe.testing.cluster import BookieProcess

NOFILE = 256
LEDGERS = 2000
ENTRIES = 2
KEY = b"k"
WINDOW = 250
CONFIG = """
[entry_log_manager]
plugin = "per_ledger"
max_active = 16
max_open_logs = 16

[ledger_storage]
max_open_indexes = 32
"""


def entry(ledger_id: int, entry_id: int) -> bytes:
    return b"%d:%d:" % (ledger_id, entry_id) + os.urandom(entry_id * 7)


def open_fds(b: BookieProcess) -> int:
    assert b.proc is not None
    return len(os.listdir(f"/proc/{b.proc.pid}/fd"))


def start(data_dir: Path, config: Path) -> BookieProcess:
    b = BookieProcess(data_dir, args=("--config", str(config)))
    b.spawn(env={"BKFRAME_RLIMIT_NOFILE": str(NOFILE)})
    return b.wait_started()


async def add_all(b: BookieProcess, entries: dict[tuple[int, int], bytes]) -> list[Status]:
    statuses: list[Status] = []
    items = list(entries.items())
    async with connect_bookie(b.host, b.port) as bk:
        # Entry by entry across all ledgers: every ledger's index and log are opened again
        # (evicted in between) for each of its entries. WINDOW in flight at a time.
        for at in range(0, len(items), WINDOW):
            pending = [bk.submit_add(lid, e, data, master_key=KEY) for (lid, e), data in items[at : at + WINDOW]]
            statuses += [(await pend.wait()).status for pend in pending]
    return statuses


async def read_all(b: BookieProcess, keys: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[Status, bytes]]:
    async with connect_bookie(b.host, b.port) as bk:
        out = {}
        for at in range(0, len(keys), WINDOW):
            pending = [(key, bk.submit_read(*key, master_key=KEY)) for key in keys[at : at + WINDOW]]
            for key, pend in pending:
                r = await pend.wait()
                out[key] = (r.status, bytes(r.data) if r.status == Status.OK else b"")
        return out


async def test_a_bookie_holds_eight_times_more_ledgers_than_fds_across_a_sigkill(
    tmp_path: Path, bookie_processes: list[BookieProcess]
) -> None:
    config = tmp_path / "bookie.toml"
    config.write_text(CONFIG)
    b = start(tmp_path / "data", config)
    bookie_processes.append(b)
    entries = {(lid, e): entry(lid, e) for e in range(ENTRIES) for lid in range(1, LEDGERS + 1)}
    statuses = await add_all(b, entries)
    assert set(statuses) == {Status.OK}, f"answers other than OK: {sorted(set(statuses) - {Status.OK})}"
    async with connect_bookie(b.host, b.port) as bk:
        fenced = await bk.read(7, 0, master_key=KEY, fence=True)
        assert fenced.status == Status.OK
    assert open_fds(b) < NOFILE // 2, "the caches keep the bookie well under its limit"

    b.kill()  # unclean: the restart replays the journal into storage
    started = time.monotonic()
    b2 = start(tmp_path / "data", config)
    bookie_processes.append(b2)
    restart_s = time.monotonic() - started
    got = await read_all(b2, sorted(entries))
    bad = {key: status for key, (status, _) in got.items() if status != Status.OK}
    assert not bad, f"{len(bad)} reads not OK, e.g. {list(bad.items())[:5]}"
    assert all(got[key][1] == data for key, data in entries.items())
    async with connect_bookie(b2.host, b2.port) as bk:
        late = await bk.add(7, ENTRIES, b"late", master_key=KEY)
        info = await bk.info()
    assert late.status == Status.FENCED, "the fence survived the SIGKILL"
    assert info["ledgers"] == LEDGERS
    assert open_fds(b2) < NOFILE // 2
    assert restart_s < 60, f"restart took {restart_s:.1f} s"
    assert b2.stop() == 0
