"""Every request and response survives encoding and decoding (the wire format itself is
in docs/protocol.md; malformed input is tests/bookie/test_malformed_input.py)."""

from __future__ import annotations

from bkframe import proto as p

KEY = b"k" * 20


def decoded(*messages: bytes | list[bytes]) -> list[p.Request | p.BadMessage]:
    parts: list[bytes] = []
    for m in messages:
        parts.extend(m if isinstance(m, list) else [m])
    frame = p.frame(parts)
    return p.decode_requests(memoryview(frame[4:]), max_entry_size=1 << 20)


def test_requests_round_trip() -> None:
    requests = decoded(
        p.encode_add(1, 7, 3, 2, 1, KEY, b"payload", recovery=True),
        p.encode_add_batch(2, 7, 2, 0, KEY, [3, 4], [b"a", b"bc"]),
        p.encode_read(3, 7, p.LAST_ENTRY, master_key=KEY, fence=True),
        p.encode_read_lac(4, 7, previous_lac=5, timeout_ms=250),
        p.encode_sync(5, 7),
        p.encode_write_lac(6, 7, 9, KEY),
        p.encode_write_close(7, 7, KEY),
        p.encode_list_entries(8, 7, 0, 99),
        p.encode_bookie_info(9),
    )
    add, batch, read, lac, sync, write_lac, close, listing, info = requests
    assert isinstance(add, p.AddRequest)
    assert (add.ledger_id, add.entry_id, add.lac, add.ledger_type, add.master_key, bytes(add.data), add.recovery) == (
        7, 3, 2, 1, KEY, b"payload", True
    )
    assert isinstance(batch, p.AddBatchRequest)
    assert (batch.entry_ids, [bytes(e) for e in batch.entries], batch.lac) == ([3, 4], [b"a", b"bc"], 2)
    assert read == p.ReadRequest(3, 7, p.LAST_ENTRY, KEY, True)
    assert lac == p.ReadLacRequest(4, 7, 5, 250)
    assert sync == p.SyncRequest(5, 7)
    assert write_lac == p.WriteLacRequest(6, 7, 9, KEY)
    assert close == p.WriteCloseRequest(7, 7, KEY)
    assert listing == p.ListEntriesRequest(8, 7, 0, 99)
    assert info == p.BookieInfoRequest(9)


def test_responses_round_trip() -> None:
    frame = p.frame([
        p.encode_add_response(1, p.Status.OK, 7, 3, 2),
        *p.encode_read_response(2, p.Status.OK, 7, 3, 2, b"entry"),
        *p.encode_read_response(3, p.Status.NO_ENTRY, 7, 4, 2, b"not here"),
        p.encode_read_lac_response(4, p.Status.OK, 7, 2, 3),
        p.encode_list_entries_response(5, p.Status.OK, 7, limbo=True, next_first=10, runs=[(0, 2), (5, 5)]),
        p.encode_error_response(6, p.Status.BAD_REQUEST, "what was wrong"),
    ])
    add, read, missing, lac, listing, error = p.decode_responses(frame[4:])
    assert (add.op, add.status, add.request_id, add.entry_id, add.lac) == (p.Op.ADD, p.Status.OK, 1, 3, 2)
    assert (read.data, read.lac) == (b"entry", 2)
    assert (missing.status, missing.message) == (p.Status.NO_ENTRY, "not here")
    assert (lac.lac, lac.last_entry) == (2, 3)
    assert (listing.runs, listing.next_first, listing.limbo) == (((0, 2), (5, 5)), 10, True)
    assert (error.status, error.message) == (p.Status.BAD_REQUEST, "what was wrong")


def test_status_errors_are_typed() -> None:
    from bkframe.errors import BookieError, LedgerFencedError, NoSuchLedgerError

    assert isinstance(p.error_for(p.Status.FENCED, "fenced", "b1"), LedgerFencedError)
    missing = p.error_for(p.Status.NO_LEDGER, "not here", "b1", ledger_id=7)
    assert isinstance(missing, NoSuchLedgerError) and missing.ledger_id == 7
    other = p.error_for(p.Status.IO_ERROR, "disk", "b1")
    assert isinstance(other, BookieError) and other.status is p.Status.IO_ERROR and "b1: IO_ERROR: disk" in str(other)


def test_read_batch_round_trip_and_bad_ranges() -> None:
    (req,) = decoded(p.encode_read_batch(1, 7, 10, 265, 1 << 20, 3))
    assert req == p.ReadBatchRequest(1, 7, 10, 265, 1 << 20, 3)
    for first, last, max_bytes in ((-1, 5, 100), (5, 4, 100), (0, p.MAX_READ_BATCH, 100), (0, 5, 0)):
        (bad,) = decoded(p.encode_read_batch(2, 7, first, last, max_bytes))
        assert isinstance(bad, p.BadMessage) and "READ_BATCH" in bad.reason
    frame = p.frame([
        *p.encode_read_batch_response(3, p.Status.OK, 7, 12, [10, 11, 12], [b"a", b"", b"ccc"]),
        *p.encode_read_batch_response(4, p.Status.OK, 7, 12),
        *p.encode_read_batch_response(5, p.Status.NO_LEDGER, 7, -1, message="ledger 7 is not here"),
    ])
    full, empty, missing = p.decode_responses(frame[4:])
    assert (full.op, full.lac, full.entries, full.message) == (p.Op.READ_BATCH, 12, ((10, b"a"), (11, b""), (12, b"ccc")), "")
    assert empty.entries == () and empty.status == p.Status.OK
    assert (missing.status, missing.entries, missing.message) == (p.Status.NO_LEDGER, (), "ledger 7 is not here")


def test_features_and_try_again_round_trip() -> None:
    """FEATURES carries the bits a client understands (unknown ones pass through for the
    bookie to ignore); TRY_AGAIN is a status like the others; a FEATURES answer its bits."""
    (req, more) = decoded(p.encode_features(0, p.Feature.TRY_AGAIN), p.encode_features(3, 0x80000001))
    assert req == p.FeaturesRequest(0, 1) and more == p.FeaturesRequest(3, 0x80000001)
    frame = p.frame([
        p.encode_features_response(0, p.Feature.TRY_AGAIN),
        p.encode_add_batch_response(1, p.Status.TRY_AGAIN, 7, 2, -1, "not decided yet"),
    ])
    features, retry = p.decode_responses(frame[4:])
    assert (features.op, features.status, features.features) == (p.Op.FEATURES, p.Status.OK, 1)
    assert (retry.status, retry.message) == (p.Status.TRY_AGAIN, "not decided yet")
