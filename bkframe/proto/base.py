"""What every operation's messages share: :class:`Reply`, the fields of every response;
:class:`BadMessage`, a request that did not parse; and the checks of ids and texts that
several operations' decoders make. Each operation's own messages: :mod:`bkframe.proto.ops`.
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar, TypeVar

import attrs

from bkframe.errors import ProtocolError
from bkframe.proto.codes import MAX_LEDGER_ID, MAX_MASTER_KEY, Op, Status


@attrs.frozen
class Reply:
    """A decoded response (client side): every operation's response class extends it with
    its own fields, each with a default, so that an error answer -- which carries only a
    status and a message -- is still of its request's response class."""

    op: ClassVar[Op] = Op.ERROR
    request_id: int
    status: Status = Status.OK
    #: A non-OK status's explanation, from the bookie.
    message: str = ""


R = TypeVar("R", bound=Reply)


@attrs.frozen
class LedgerRequest:
    """A request about one ledger: every such operation's request class extends it."""

    request_id: int
    ledger_id: int


@attrs.frozen
class LedgerReply(Reply):
    """A response about one ledger (its id first, as on the wire)."""

    ledger_id: int = 0


@attrs.frozen
class ErrorResponse(Reply):
    """An ERROR message: the bookie could not parse or serve a request (its request id; 0
    for the connection as a whole). The client hands it to the request as that request's
    own response class with this status and message."""


@attrs.frozen
class BadMessage:
    """A message of a frame that could not be parsed; answered with BAD_REQUEST."""

    request_id: int
    op: int
    reason: str


def check_ledger(op: str, ledger_id: int) -> None:
    if ledger_id > MAX_LEDGER_ID:
        raise ProtocolError(
            f"{op} ledger id {ledger_id} is out of range: ledger ids are 0..{MAX_LEDGER_ID} "
            f"(2^63 - 1, what metadata stores hold); use an id the metadata store gave out"
        )


def check_lac(op: str, lac: int) -> None:
    if lac < -1:
        raise ProtocolError(f"{op} lac {lac} is invalid (-1 means none yet; entry ids are >= 0)")


def check_entry_size(size: int, max_entry_size: int) -> None:
    if size > max_entry_size:
        raise ProtocolError(
            f"entry of {size} bytes is larger than this bookie's max_entry_size "
            f"{max_entry_size}; split it or raise [bookie] max_entry_size"
        )


def fixed_request(op: str, fields: struct.Struct, body: memoryview, flags: int, at: int, end: int) -> tuple[Any, ...]:
    """The values of a request that is ``fields`` and nothing more, and takes no flags."""
    if flags or end - at != fields.size:
        raise ProtocolError(f"{op} message has the wrong length or unknown flags")
    return fields.unpack_from(body, at)


def keyed_request(
    op: str, fields: struct.Struct, body: memoryview, flags: int, at: int, end: int
) -> tuple[tuple[Any, ...], bytes]:
    """The values and the master key of a request that is ``fields`` (the key's length the
    last of them), then the key and nothing more, and takes no flags."""
    *values, key_len = fields.unpack_from(body, at)
    key_at = at + fields.size
    if flags or key_len > MAX_MASTER_KEY or key_at + key_len != end:
        raise ProtocolError(f"{op} message has the wrong length, key length or unknown flags")
    return tuple(values), bytes(body[key_at:end])


def fixed_reply(cls: type[R], fields: struct.Struct, body: memoryview, status: Status, request_id: int, at: int, end: int) -> R:
    """A response that is ``fields`` -- its class's own fields, in their order -- then a message."""
    return cls(request_id, status, text(body, at + fields.size, end), *fields.unpack_from(body, at))


def text(body: memoryview | bytes, at: int, end: int) -> str:
    """A message's trailing UTF-8 text (an error's explanation); bad bytes are replaced."""
    return str(body[at:end], "utf-8", "replace") if end > at else ""
