"""Journal records (bkframe.bookie.durability.journal_records) as bytes: each type written and read back,
and the ENTRIES layout byte for byte, whichever path (one entry or many) wrote it -- the
module is compiled, and scripts/test runs this again on its Python source."""

from __future__ import annotations

import struct

import pytest

from bkframe.bookie.durability import journal_records as jr


def test_entries_records_keep_their_layout_and_read_back() -> None:
    one = b"".join(jr.entries_record(7, [5], [b"hello"], 4))
    # type, ledger, count, LAC; then (entry id, length) per entry; then the bytes.
    assert one == struct.pack("<BQIq", 1, 7, 1, 4) + struct.pack("<qI", 5, 5) + b"hello"
    many = b"".join(jr.entries_record(7, [5, 6, 9], [b"a", memoryview(b""), b"ccc"], -1))
    assert many == struct.pack("<BQIq", 1, 7, 3, -1) + struct.pack("<qIqIqI", 5, 1, 6, 0, 9, 3) + b"accc"
    record = jr.decode(many)
    assert isinstance(record, jr.EntriesRecord)
    assert (record.ledger_id, record.entry_ids, [bytes(e) for e in record.entries], record.lac) == (
        7,
        (5, 6, 9),
        [b"a", b"", b"ccc"],
        -1,
    )
    assert jr.decode(one) == jr.EntriesRecord(7, (5,), (memoryview(b"hello"),), 4)


def test_every_record_type_reads_back() -> None:
    def back(parts: list[jr.Buffer]) -> jr.Record:
        return jr.decode(b"".join(bytes(p) for p in parts))

    assert back(jr.master_record(3, 2, b"key")) == jr.MasterRecord(3, 2, b"key")
    assert back(jr.fence_record(3)) == jr.FenceRecord(3)
    assert back(jr.lac_record(3, 41)) == jr.LacRecord(3, 41)
    stored = back(jr.stored_record(3, 8, [(9, 1, 4096, 1044, 0xDEADBEEF)]))
    assert stored == jr.StoredRecord(3, (jr.StoredEntry(9, 1, 4096, 1044, 0xDEADBEEF),), 8)


@pytest.mark.parametrize("raw", [b"", b"\x09", b"\x01\x00", struct.pack("<BQIq", 1, 7, 2, 0) + struct.pack("<qI", 1, 3)])
def test_records_that_do_not_parse_raise_bad_record(raw: bytes) -> None:
    with pytest.raises(jr.BadRecordError):
        jr.decode(raw)
