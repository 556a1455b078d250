"""The wire format did not change with the sans-IO core (issue 38): each message is
byte-for-byte what the code before it wrote (the hex below was taken from commit 337c360's
encoders), and decodes back to the same fields. So old and new clients and bookies talk
to each other; docs/protocol.md stays true."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bkframe.proto.base import BadMessage
from bkframe.proto.codes import LAST_ENTRY, Status
from bkframe.proto.ops.add import encode_add, encode_add_response
from bkframe.proto.ops.add_batch import encode_add_batch, encode_add_batch_response
from bkframe.proto.ops.bookie_info import encode_bookie_info, encode_bookie_info_response
from bkframe.proto.ops.connection_setup import encode_auth, encode_auth_response, encode_features, encode_features_response
from bkframe.proto.ops.list_entries import encode_list_entries, encode_list_entries_response
from bkframe.proto.ops.read import encode_read, encode_read_response
from bkframe.proto.ops.read_batch import encode_read_batch, encode_read_batch_response
from bkframe.proto.ops.read_lac import encode_read_lac, encode_read_lac_response
from bkframe.proto.ops.sync import encode_sync, encode_sync_response
from bkframe.proto.ops.write_close import encode_write_close, encode_write_close_response
from bkframe.proto.ops.write_lac import encode_write_lac, encode_write_lac_response
from bkframe.proto.table import decode_requests, decode_responses, encode_error_response

K = b"key-0123456789abcdef"

#: name: (the bytes the code before issue 38 wrote, how the code now writes it)
REQUESTS: dict[str, tuple[str, Callable[[], object]]] = {
    "add": (
        "4100000001010100000000000000070000000000000003000000000000000200000000000000010014006b65792d303132333435363738396162636465667061796c6f6164",
        lambda: encode_add(1, 7, 3, 2, 1, K, b"payload", recovery=True),
    ),
    "add_batch": (
        "51000000050002000000000000000700000000000000020000000000000000001400020000006b65792d30313233343536373839616263646566030000000000000001000000040000000000000002000000616263",
        lambda: encode_add_batch(2, 7, 2, 0, K, [3, 4], [b"a", b"bc"]),
    ),
    "add_batch_one": (
        "45000000050003000000000000000700000000000000020000000000000000001400010000006b65792d30313233343536373839616263646566030000000000000003000000616263",
        lambda: encode_add_batch(3, 7, 2, 0, K, [3], [b"abc"]),
    ),
    "read": (
        "30000000020104000000000000000700000000000000ffffffffffffffff14006b65792d30313233343536373839616263646566",
        lambda: encode_read(4, 7, LAST_ENTRY, master_key=K, fence=True),
    ),
    "read_lac": ("12000000030005000000000000000700000000000000", lambda: encode_read_lac(5, 7)),
    "read_lac_poll": (
        "1e0000000301060000000000000007000000000000000500000000000000fa000000",
        lambda: encode_read_lac(6, 7, previous_lac=5, timeout_ms=250),
    ),
    "sync": ("12000000060007000000000000000700000000000000", lambda: encode_sync(7, 7)),
    "write_lac": (
        "30000000070008000000000000000700000000000000090000000000000014006b65792d30313233343536373839616263646566",
        lambda: encode_write_lac(8, 7, 9, K),
    ),
    "write_close": (
        "2800000009000900000000000000070000000000000014006b65792d30313233343536373839616263646566",
        lambda: encode_write_close(9, 7, K),
    ),
    "list_entries": (
        "2200000008000a00000000000000070000000000000000000000000000006300000000000000",
        lambda: encode_list_entries(10, 7, 0, 99),
    ),
    "read_batch": (
        "400000000a000b00000000000000070000000000000000000000000000000900000000000000001000000200000014006b65792d30313233343536373839616263646566",
        lambda: encode_read_batch(11, 7, 0, 9, 4096, 2, master_key=K),
    ),
    "auth": ("1b0000000b000000000000000000050006000000746f6b656e736563726574", lambda: encode_auth(0, "token", b"secret")),
    "features": ("0e0000000c00000000000000000001000000", lambda: encode_features(0, 1)),
    "bookie_info": ("0a00000004000c00000000000000", lambda: encode_bookie_info(12)),
}
RESPONSES: dict[str, tuple[str, Callable[[], object]]] = {
    "add": (
        "2200000001000100000000000000070000000000000003000000000000000200000000000000",
        lambda: encode_add_response(1, Status.OK, 7, 3, 2),
    ),
    "add_batch": (
        "2400000005030200000000000000070000000000000002000000010000000000000066656e636564",
        lambda: encode_add_batch_response(2, Status.FENCED, 7, 2, 1, "fenced"),
    ),
    "read": (
        "2700000002000400000000000000070000000000000003000000000000000200000000000000656e747279",
        lambda: encode_read_response(4, Status.OK, 7, 3, 2, b"entry"),
    ),
    "read_lac": (
        "2200000003000500000000000000070000000000000002000000000000000300000000000000",
        lambda: encode_read_lac_response(5, Status.OK, 7, 2, 3),
    ),
    "sync": ("1a0000000600070000000000000007000000000000000400000000000000", lambda: encode_sync_response(7, Status.OK, 7, 4)),
    "write_lac": (
        "1a0000000700080000000000000007000000000000000900000000000000",
        lambda: encode_write_lac_response(8, Status.OK, 7, 9),
    ),
    "write_close": ("12000000090009000000000000000700000000000000", lambda: encode_write_close_response(9, Status.OK, 7)),
    "list_entries": (
        "3f00000008000a000000000000000700000000000000010a00000000000000020000000000000000000000020000000000000005000000000000000500000000000000",
        lambda: encode_list_entries_response(10, Status.OK, 7, limbo=True, next_first=10, runs=[(0, 2), (5, 5)]),
    ),
    "read_batch": (
        "3a0000000a000b0000000000000007000000000000000c00000000000000020000000a00000000000000010000000c000000000000000300000061636363",
        lambda: encode_read_batch_response(11, Status.OK, 7, 12, [10, 12], [b"a", b"ccc"]),
    ),
    "auth": ("0f0000000b000000000000000000616c696365", lambda: encode_auth_response(0, Status.OK, "alice")),
    "features": ("0e0000000c00000000000000000001000000", lambda: encode_features_response(0, 1)),
    "bookie_info": (
        "1f00000004000c000000000000007b227374617465223a20227772697461626c65227d",
        lambda: encode_bookie_info_response(12, {"state": "writable"}),
    ),
    "error": (
        "1800000000070d0000000000000077686174207761732077726f6e67",
        lambda: encode_error_response(13, Status.BAD_REQUEST, "what was wrong"),
    ),
}


def as_bytes(message: object) -> bytes:
    return message if isinstance(message, bytes) else b"".join(message)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_requests_are_written_as_before_and_read_back(name: str) -> None:
    old, encode = REQUESTS[name]
    assert as_bytes(encode()).hex() == old
    (request,) = decode_requests(memoryview(bytes.fromhex(old)), 1 << 20)
    assert not isinstance(request, BadMessage), request


@pytest.mark.parametrize("name", sorted(RESPONSES))
def test_responses_are_written_as_before_and_read_back(name: str) -> None:
    old, encode = RESPONSES[name]
    assert as_bytes(encode()).hex() == old
    (response,) = decode_responses(bytes.fromhex(old))
    assert response.request_id == int.from_bytes(bytes.fromhex(old)[6:14], "little")
