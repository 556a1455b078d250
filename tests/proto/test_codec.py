"""Every request and response survives encoding and decoding (the wire format itself is
in docs/protocol.md; malformed input is tests/bookie/test_malformed_input.py)."""

from __future__ import annotations

from bkframe.client.bookies.errors import error_for
from bkframe.proto.base import BadMessage
from bkframe.proto.codes import LAST_ENTRY, MAX_READ_BATCH, Feature, Op, Status
from bkframe.proto.frames import pack_frame
from bkframe.proto.ops.add import AddRequest, encode_add, encode_add_response
from bkframe.proto.ops.add_batch import AddBatchRequest, encode_add_batch, encode_add_batch_response
from bkframe.proto.ops.bookie_info import BookieInfoRequest, encode_bookie_info
from bkframe.proto.ops.connection_setup import FeaturesRequest, encode_features, encode_features_response
from bkframe.proto.ops.list_entries import ListEntriesRequest, encode_list_entries, encode_list_entries_response
from bkframe.proto.ops.read import ReadRequest, encode_read, encode_read_response
from bkframe.proto.ops.read_batch import ReadBatchRequest, encode_read_batch, encode_read_batch_response
from bkframe.proto.ops.read_lac import ReadLacRequest, encode_read_lac, encode_read_lac_response
from bkframe.proto.ops.sync import SyncRequest, encode_sync
from bkframe.proto.ops.write_close import WriteCloseRequest, encode_write_close
from bkframe.proto.ops.write_lac import WriteLacRequest, encode_write_lac
from bkframe.proto.table import Request, decode_requests, decode_responses, encode_error_response

KEY = b"k" * 20


def decoded(*messages: bytes | list[bytes]) -> list[Request | BadMessage]:
    parts: list[bytes] = []
    for m in messages:
        parts.extend(m if isinstance(m, list) else [m])
    frame = pack_frame(parts)
    return decode_requests(memoryview(frame[4:]), max_entry_size=1 << 20)


def test_requests_round_trip() -> None:
    requests = decoded(
        encode_add(1, 7, 3, 2, 1, KEY, b"payload", recovery=True),
        encode_add_batch(2, 7, 2, 0, KEY, [3, 4], [b"a", b"bc"]),
        encode_read(3, 7, LAST_ENTRY, master_key=KEY, fence=True),
        encode_read_lac(4, 7, previous_lac=5, timeout_ms=250),
        encode_sync(5, 7),
        encode_write_lac(6, 7, 9, KEY),
        encode_write_close(7, 7, KEY),
        encode_list_entries(8, 7, 0, 99),
        encode_bookie_info(9),
    )
    add, batch, read, lac, sync, write_lac, close, listing, info = requests
    assert isinstance(add, AddRequest)
    assert (add.ledger_id, add.entry_id, add.lac, add.ledger_type, add.master_key, bytes(add.data), add.recovery) == (
        7, 3, 2, 1, KEY, b"payload", True
    )
    assert isinstance(batch, AddBatchRequest)
    assert (batch.entry_ids, [bytes(e) for e in batch.entries], batch.lac) == ([3, 4], [b"a", b"bc"], 2)
    assert read == ReadRequest(3, 7, LAST_ENTRY, KEY, True)
    assert lac == ReadLacRequest(4, 7, 5, 250)
    assert sync == SyncRequest(5, 7)
    assert write_lac == WriteLacRequest(6, 7, 9, KEY)
    assert close == WriteCloseRequest(7, 7, KEY)
    assert listing == ListEntriesRequest(8, 7, 0, 99)
    assert info == BookieInfoRequest(9)


def test_responses_round_trip() -> None:
    frame = pack_frame([
        encode_add_response(1, Status.OK, 7, 3, 2),
        *encode_read_response(2, Status.OK, 7, 3, 2, b"entry"),
        *encode_read_response(3, Status.NO_ENTRY, 7, 4, 2, b"not here"),
        encode_read_lac_response(4, Status.OK, 7, 2, 3),
        encode_list_entries_response(5, Status.OK, 7, limbo=True, next_first=10, runs=[(0, 2), (5, 5)]),
        encode_error_response(6, Status.BAD_REQUEST, "what was wrong"),
    ])
    add, read, missing, lac, listing, error = decode_responses(frame[4:])
    assert (add.op, add.status, add.request_id, add.entry_id, add.last_add_synced) == (Op.ADD, Status.OK, 1, 3, 2)
    assert (read.data, read.lac) == (b"entry", 2)
    assert (missing.status, missing.message) == (Status.NO_ENTRY, "not here")
    assert (lac.lac, lac.last_entry) == (2, 3)
    assert (listing.runs, listing.next_first, listing.limbo) == (((0, 2), (5, 5)), 10, True)
    assert (error.status, error.message) == (Status.BAD_REQUEST, "what was wrong")


def test_status_errors_are_typed() -> None:
    from bkframe.errors import BookieError, LedgerFencedError, NoSuchLedgerError

    assert isinstance(error_for(Status.FENCED, "fenced", "b1"), LedgerFencedError)
    missing = error_for(Status.NO_LEDGER, "not here", "b1", ledger_id=7)
    assert isinstance(missing, NoSuchLedgerError) and missing.ledger_id == 7
    other = error_for(Status.IO_ERROR, "disk", "b1")
    assert isinstance(other, BookieError) and other.status is Status.IO_ERROR and "b1: IO_ERROR: disk" in str(other)


def test_read_batch_round_trip_and_bad_ranges() -> None:
    (req,) = decoded(encode_read_batch(1, 7, 10, 265, 1 << 20, 3))
    assert req == ReadBatchRequest(1, 7, 10, 265, 1 << 20, 3)
    for first, last, max_bytes in ((-1, 5, 100), (5, 4, 100), (0, MAX_READ_BATCH, 100), (0, 5, 0)):
        (bad,) = decoded(encode_read_batch(2, 7, first, last, max_bytes))
        assert isinstance(bad, BadMessage) and "READ_BATCH" in bad.reason
    frame = pack_frame([
        *encode_read_batch_response(3, Status.OK, 7, 12, [10, 11, 12], [b"a", b"", b"ccc"]),
        *encode_read_batch_response(4, Status.OK, 7, 12),
        *encode_read_batch_response(5, Status.NO_LEDGER, 7, -1, message="ledger 7 is not here"),
    ])
    full, empty, missing = decode_responses(frame[4:])
    assert (full.op, full.lac, full.entries, full.message) == (Op.READ_BATCH, 12, ((10, b"a"), (11, b""), (12, b"ccc")), "")
    assert empty.entries == () and empty.status == Status.OK
    assert (missing.status, missing.entries, missing.message) == (Status.NO_LEDGER, (), "ledger 7 is not here")


def test_features_and_try_again_round_trip() -> None:
    """FEATURES carries the bits a client understands (unknown ones pass through for the
    bookie to ignore); TRY_AGAIN is a status like the others; a FEATURES answer its bits."""
    (req, more) = decoded(encode_features(0, Feature.TRY_AGAIN), encode_features(3, 0x80000001))
    assert req == FeaturesRequest(0, 1) and more == FeaturesRequest(3, 0x80000001)
    frame = pack_frame([
        encode_features_response(0, Feature.TRY_AGAIN),
        encode_add_batch_response(1, Status.TRY_AGAIN, 7, 2, -1, "not decided yet"),
    ])
    features, retry = decode_responses(frame[4:])
    assert (features.op, features.status, features.features) == (Op.FEATURES, Status.OK, 1)
    assert (retry.status, retry.message) == (Status.TRY_AGAIN, "not decided yet")
