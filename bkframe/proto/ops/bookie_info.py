"""GET_BOOKIE_INFO: what the bookie says about itself (state, free space, version), as JSON."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import attrs

from bkframe.errors import ProtocolError
from bkframe.proto.base import Reply, text
from bkframe.proto.codes import Op, Status
from bkframe.proto.frames import pack_message


@attrs.frozen
class BookieInfoRequest:
    request_id: int


@attrs.frozen
class BookieInfoResponse(Reply):
    op: ClassVar[Op] = Op.GET_BOOKIE_INFO
    info: dict[str, Any] | None = None



def encode_bookie_info(request_id: int) -> bytes:
    return pack_message(Op.GET_BOOKIE_INFO, 0, request_id)


def decode_bookie_info(
    body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int
) -> BookieInfoRequest:
    if end != at:
        raise ProtocolError("GET_BOOKIE_INFO message has the wrong length")
    return BookieInfoRequest(request_id)


def encode_bookie_info_response(request_id: int, info: dict[str, Any]) -> bytes:
    return pack_message(Op.GET_BOOKIE_INFO, Status.OK, request_id, json.dumps(info, sort_keys=True).encode())


def decode_bookie_info_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> BookieInfoResponse:
    if status != Status.OK:
        return BookieInfoResponse(request_id, status, text(body, at, end))
    try:
        info = json.loads(bytes(body[at:end]))
    except ValueError as e:
        raise ProtocolError(f"GET_BOOKIE_INFO answer is not JSON: {e}") from None
    return BookieInfoResponse(request_id, status, "", info)
