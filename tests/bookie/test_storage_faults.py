"""Storage faults on real bookie processes: a failed entry-log write (short write, then
EIO or ENOSPC) fails the add (IO_ERROR, or READ_ONLY for a full disk) and misplaces
nothing; the bookie keeps serving."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from bkframe.client.bookies.connection import connect_bookie
from bkframe.proto.codes import Status
from bkframe.testing.cluster import BookieProcess
from bkframe.testing.faults import write_faults

KEY = b"k"


#: Not bkframe.testing.kit.payload: sizes that vary with the entry, across storage write paths.
def payload(ledger: int, entry: int) -> bytes:
    return b"%d:%d|" % (ledger, entry) * (30 + entry % 40)


async def _read_back(b: BookieProcess, entries: dict[tuple[int, int], bytes]) -> dict[tuple[int, int], str]:
    """The entries that do not read back as stored, with what the bookie said instead."""
    wrong: dict[tuple[int, int], str] = {key: "not read" for key in entries}
    async with connect_bookie(b.host, b.port) as bk:
        for (ledger, entry), want in sorted(entries.items()):
            r = await bk.read(ledger, entry, master_key=KEY)
            if r.status == Status.OK and r.data == want:
                del wrong[(ledger, entry)]
            else:
                wrong[(ledger, entry)] = f"{r.status.name} {r.message}"
    return wrong


@pytest.mark.parametrize(
    "fault, status, says",
    [
        # A failing disk: the add fails, the bookie stays writable.
        (write_faults.EIO_FILE, Status.IO_ERROR, "Input/output error"),
        # A full disk: the add fails and the bookie turns read-only until its disk check
        # sees space again (see test_disk_full.py for the whole story).
        (write_faults.ENOSPC_FILE, Status.READ_ONLY, "No space left on device"),
    ],
)
async def test_entry_log_write_failure_fails_the_add_and_later_entries_read_back(
    tmp_path: Path,
    bookie_processes: list[BookieProcess],
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
    status: Status,
    says: str,
) -> None:
    control = tmp_path / "faults"
    control.mkdir()
    monkeypatch.setenv(write_faults.CONTROL_ENV, str(control))
    data_dir = tmp_path / "bookie"
    config = tmp_path / "bookie.toml"
    # The injected ENOSPC is the only full disk here: with the default thresholds a real
    # disk over 90% used (as a CI machine's may be) would keep the bookie read-only.
    config.write_text("[bookie]\ndisk_check_interval_s = 0.2\ndisk_usage_threshold = 1.0\ndisk_usage_lwm = 0.999\n")
    b = BookieProcess(data_dir).start("--config", str(config))
    bookie_processes.append(b)
    acked: dict[tuple[int, int], bytes] = {}
    finished = False
    async with connect_bookie(b.host, b.port) as bk:
        for e in range(10):
            for ledger in (1, 2):
                assert (await bk.add(ledger, e, payload(ledger, e), master_key=KEY)).status == Status.OK
                acked[(ledger, e)] = payload(ledger, e)
        # The disk fails: a short write, then an error. The add fails, clearly.
        (control / fault).write_text("/entrylogs/")
        r = await bk.add(1, 10, payload(1, 10), master_key=KEY)
        assert r.status == status, r
        assert says in r.message
        if status == Status.IO_ERROR:
            assert "1:10" in r.message
            r = await bk.add(1, 11, payload(1, 11), master_key=KEY)
            assert r.status == status, r
        # The disk is fine again; the same connection goes on.
        (control / fault).unlink()
        with trio.fail_after(30):
            for e in range(12, 40):
                for ledger in (1, 2):
                    while (got := (await bk.add(ledger, e, payload(ledger, e), master_key=KEY)).status) == Status.READ_ONLY:
                        await trio.sleep(0.1)  # until the disk check sees the space
                    assert got == Status.OK
                    acked[(ledger, e)] = payload(ledger, e)
        info = await bk.info()
        if status == Status.IO_ERROR:
            assert info["counters"]["storage_write_errors"] == 2
        assert (await bk.read(1, 10, master_key=KEY)).status == Status.NO_ENTRY
        finished = True
    # (The block finished: the bookie answered it all on one connection.)
    assert finished, b.log_path.read_text()[-3000:]
    assert await _read_back(b, acked) == {}
    # After a clean stop (a checkpoint: reads now come from the entry logs and indexes
    # alone, no journal replay) every acknowledged entry is still there.
    assert b.stop() == 0
    b2 = BookieProcess(data_dir).start()
    bookie_processes.append(b2)
    assert await _read_back(b2, acked) == {}
    assert b2.stop() == 0
