"""Storage faults on real bookie processes: a failed entry-log write (short write, then
ENOSPC) is answered IO_ERROR and misplaces nothing; the bookie keeps serving."""

from __future__ import annotations

from pathlib import Path

import pytest

from bkframe.core import protocol as p
from bkframe.core.bookie_client import connect_bookie
from bkframe.testing import write_faults
from tests.conftest import BookieProcess

KEY = b"k"


def payload(ledger: int, entry: int) -> bytes:
    return b"%d:%d|" % (ledger, entry) * (30 + entry % 40)


async def _read_back(b: BookieProcess, entries: dict[tuple[int, int], bytes]) -> dict[tuple[int, int], str]:
    """The entries that do not read back as stored, with what the bookie said instead."""
    wrong: dict[tuple[int, int], str] = {key: "not read" for key in entries}
    async with connect_bookie(b.host, b.port) as bk:
        for (ledger, entry), want in sorted(entries.items()):
            r = await bk.read(ledger, entry)
            if r.status == p.Status.OK and r.data == want:
                del wrong[(ledger, entry)]
            else:
                wrong[(ledger, entry)] = f"{r.status.name} {r.message}"
    return wrong


async def test_entry_log_write_failure_is_io_error_and_later_entries_read_back(
    tmp_path: Path, bookie_processes: list[BookieProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    control = tmp_path / "faults"
    control.mkdir()
    monkeypatch.setenv(write_faults.CONTROL_ENV, str(control))
    data_dir = tmp_path / "bookie"
    b = BookieProcess(data_dir)
    bookie_processes.append(b)
    acked: dict[tuple[int, int], bytes] = {}
    finished = False
    async with connect_bookie(b.host, b.port) as bk:
        for e in range(10):
            for ledger in (1, 2):
                assert (await bk.add(ledger, e, payload(ledger, e), master_key=KEY)).status == p.Status.OK
                acked[(ledger, e)] = payload(ledger, e)
        # The disk fills up: a short write, then ENOSPC. The adds fail, clearly.
        (control / write_faults.ENOSPC_FILE).write_text("/entrylogs/")
        for e in (10, 11):
            r = await bk.add(1, e, payload(1, e), master_key=KEY)
            assert r.status == p.Status.IO_ERROR, r
            assert "No space left on device" in r.message and f"1:{e}" in r.message
        # Space is freed; the same connection goes on.
        (control / write_faults.ENOSPC_FILE).unlink()
        for e in range(12, 40):
            for ledger in (1, 2):
                assert (await bk.add(ledger, e, payload(ledger, e), master_key=KEY)).status == p.Status.OK
                acked[(ledger, e)] = payload(ledger, e)
        info = await bk.info()
        assert info["counters"]["storage_write_errors"] == 2
        assert (await bk.read(1, 10)).status == p.Status.NO_ENTRY
        finished = True
    # (A broken connection ends the block silently: the bookie must have answered it all.)
    assert finished, b.log_path.read_text()[-3000:]
    assert await _read_back(b, acked) == {}
    # After a clean stop (a checkpoint: reads now come from the entry logs and indexes
    # alone, no journal replay) every acknowledged entry is still there.
    assert b.terminate() == 0
    b2 = BookieProcess(data_dir)
    bookie_processes.append(b2)
    assert await _read_back(b2, acked) == {}
    assert b2.terminate() == 0
