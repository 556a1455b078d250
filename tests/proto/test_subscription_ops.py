"""SUB_LEASE, SUB_SETTLE, SUB_LEAVE and SUB_STATS field by field, without a socket: each
request and answer survives encoding and decoding with every field at its edges, NOT_OWNER
carries its holder, and names follow the log name rules exactly. (The bounds every operation
shares, and the subscription ops' own: test_bounds.py; random bytes: test_decoder_fuzz.py.)"""

from __future__ import annotations

import pytest

from bkframe.client.logs import model
from bkframe.proto.base import BadMessage
from bkframe.proto.codes import MAX_SUB_CONSUMER, MAX_SUB_LEASE, Op, Status
from bkframe.proto.frames import pack_frame
from bkframe.proto.ops.subscription import (
    NAME_PATTERN,
    SubLeaseRequest,
    SubLeaseResponse,
    SubLeaveRequest,
    SubRecord,
    SubSettleRequest,
    SubStatsRequest,
    SubStatsResponse,
    encode_sub_lease,
    encode_sub_lease_response,
    encode_sub_leave,
    encode_sub_refusal,
    encode_sub_settle,
    encode_sub_stats,
    encode_sub_stats_response,
)
from bkframe.proto.table import decode_requests, decode_responses
from tests.proto.samples import STATS, joined

TOP = (1 << 64) - 1


def one_request(message: bytes | list[bytes]) -> object:
    (request,) = decode_requests(memoryview(pack_frame([joined(message)])[4:]), 1 << 20)
    return request


def test_the_names_follow_the_log_name_rules() -> None:
    # The wire may not import the client: the two patterns must stay one rule.
    assert NAME_PATTERN.pattern == model.NAME_PATTERN.pattern


def test_requests_round_trip_at_their_edges() -> None:
    longest = "x" * 200
    consumer = "é" * (MAX_SUB_CONSUMER // 2)  # two bytes each: multi-byte UTF-8 counted in bytes
    assert one_request(encode_sub_lease(1, longest, longest, consumer, MAX_SUB_LEASE, 2**32 - 1, 2**32 - 1)) == (
        SubLeaseRequest(1, longest, longest, consumer, MAX_SUB_LEASE, 2**32 - 1, 2**32 - 1)
    )
    settle = encode_sub_settle(
        2, "a", "b", "c", acks=[0, TOP], ack_ranges=[(0, TOP), (7, 7)], nacks=[(TOP, 2**32 - 1)], extends=[5], lease_ms=9
    )
    assert one_request(settle) == SubSettleRequest(2, "a", "b", "c", (0, TOP), ((0, TOP), (7, 7)), ((TOP, 2**32 - 1),), (5,), 9)
    assert one_request(encode_sub_settle(3, "a", "b", "c")) == SubSettleRequest(3, "a", "b", "c")
    assert one_request(encode_sub_leave(4, "a.b", "c_d", "e-f")) == SubLeaveRequest(4, "a.b", "c_d", "e-f")
    assert one_request(encode_sub_stats(5, "A0", "z9")) == SubStatsRequest(5, "A0", "z9")


@pytest.mark.parametrize(("log", "sub", "consumer"), [("", "s", "c"), ("l", "s/x", "c"), ("l", "s", ""), ("l", "s", "c" * 256)])
def test_the_client_refuses_to_send_bad_names(log: str, sub: str, consumer: str) -> None:
    with pytest.raises(ValueError):
        encode_sub_lease(1, log, sub, consumer, 1, 0)


def test_a_lease_answer_round_trips_every_kind_of_record() -> None:
    records = [
        SubRecord(TOP, 2**32 - 1, -1, b"p" * 1000, b"", 0, {"": "", "ключ": "значение"}),
        SubRecord(0, 1, 2**62, b"", None, None, {}),
        SubRecord(3 << 32 | 4, 5, 6, b"payload", b"key", -7, {"a": "b"}),
    ]
    (answer,) = decode_responses(joined(encode_sub_lease_response(9, records)))
    assert isinstance(answer, SubLeaseResponse)
    assert (answer.status, answer.records) == (Status.OK, tuple(records))
    (empty,) = decode_responses(joined(encode_sub_lease_response(9, [])))
    assert isinstance(empty, SubLeaseResponse) and empty.records == ()


def test_stats_round_trip() -> None:
    (answer,) = decode_responses(encode_sub_stats_response(9, **STATS))
    assert answer == SubStatsResponse(9, Status.OK, "", "", **STATS)
    (nobody,) = decode_responses(encode_sub_stats_response(9, **{**STATS, "owner": None}))
    assert isinstance(nobody, SubStatsResponse) and nobody.owner is None


@pytest.mark.parametrize("op", [Op.SUB_LEASE, Op.SUB_SETTLE, Op.SUB_LEAVE, Op.SUB_STATS])
def test_not_owner_carries_the_holder_and_why(op: Op) -> None:
    (moved,) = decode_responses(encode_sub_refusal(op, 4, Status.NOT_OWNER, "owned elsewhere\nsince 3 s", holder="bookie-7"))
    assert (moved.status, moved.holder, moved.message) == (Status.NOT_OWNER, "bookie-7", "owned elsewhere\nsince 3 s")  # type: ignore[attr-defined]
    (nobody,) = decode_responses(encode_sub_refusal(op, 4, Status.NOT_OWNER, "not hosted here"))
    assert (nobody.holder, nobody.message) == ("", "not hosted here")  # type: ignore[attr-defined]
    (gone,) = decode_responses(encode_sub_refusal(op, 4, Status.NO_SUBSCRIPTION, "no such"))
    assert (gone.status, gone.holder, gone.message) == (Status.NO_SUBSCRIPTION, "", "no such")  # type: ignore[attr-defined]


def test_a_bad_lease_answer_raises_protocol_error_not_another() -> None:
    from bkframe.errors import ProtocolError

    good = joined(encode_sub_lease_response(9, [SubRecord(1, 1, 1, b"abc", b"k", 1, {"k": "v"})]))
    for cut in range(14, len(good)):
        lying = (cut - 4).to_bytes(4, "little") + good[4:cut]
        try:
            (answer,) = decode_responses(lying)
        except ProtocolError:
            continue
        assert type(answer) is SubLeaseResponse
    assert isinstance(one_request(encode_sub_stats(5, "a", "b")[:-1]), BadMessage)


@pytest.mark.parametrize("password", [b"", b"x", b"\x00" * 255])
def test_the_logs_password_travels_at_the_end_of_each_request(password: bytes) -> None:
    requests = [
        encode_sub_lease(1, "l", "s", "c", 1, 0, password=password),
        encode_sub_settle(1, "l", "s", "c", acks=[3], password=password),
        encode_sub_leave(1, "l", "s", "c", password=password),
        encode_sub_stats(1, "l", "s", password=password),
    ]
    for message in requests:
        decoded = one_request(message)
        assert isinstance(decoded, (SubLeaseRequest, SubSettleRequest, SubLeaveRequest, SubStatsRequest))
        assert (decoded.log, decoded.subscription, decoded.password) == ("l", "s", password)


def test_a_password_longer_than_its_message_is_refused() -> None:
    message = bytearray(joined(encode_sub_stats(1, "l", "s", password=b"pw")))
    message[-1] = 200  # the length byte says more than the message holds
    decoded = one_request(bytes(message))
    assert isinstance(decoded, BadMessage) and "password" in decoded.reason


def test_names_checked_once_are_kept_within_a_bound_and_bad_ones_never() -> None:
    from bkframe.proto.ops import subscription as ops

    ops._NAMES_SEEN.clear()
    for i in range(3):  # the second and third come from what the first checked
        assert one_request(encode_sub_settle(i, "log", "sub", "me", acks=[i])) == SubSettleRequest(i, "log", "sub", "me", (i,))
    assert len(ops._NAMES_SEEN) == 1
    bad = bytearray(encode_sub_leave(9, "log", "sub", "me"))
    bad[bad.index(b"log")] = ord("/")  # same lengths, a name the rules refuse: checked, refused, not kept
    for _ in range(2):
        decoded = one_request(bytes(bad))
        assert isinstance(decoded, BadMessage) and "log name b'/og' is invalid" in decoded.reason
    assert len(ops._NAMES_SEEN) == 1
    for i in range(ops.MAX_NAMES_SEEN + 10):  # a sender of ever new names cannot grow it
        one_request(encode_sub_leave(i, "log", f"s{i}", "me"))
    assert len(ops._NAMES_SEEN) <= ops.MAX_NAMES_SEEN
