"""LIST_ENTRIES: which entries of ``first..last`` a bookie holds, as runs (repair picks its
sources with it); one answer covers at most MAX_LIST_SPAN ids."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import ClassVar

import attrs
import numpy as np

from bkframe.errors import ProtocolError
from bkframe.proto.base import LedgerReply, LedgerRequest, check_ledger, fixed_request, text
from bkframe.proto.codes import Op, Status
from bkframe.proto.frames import pack_message

_FIELDS = struct.Struct("<Qqq")  # ledger, first, last
_RESPONSE = struct.Struct("<QBqI")  # ledger, limbo, next first (-1: done), run count (then runs, a message)
_RUN = np.dtype([("first", "<i8"), ("last", "<i8")])


@attrs.frozen
class ListEntriesRequest(LedgerRequest):
    first: int
    last: int


@attrs.frozen
class ListEntriesResponse(LedgerReply):
    op: ClassVar[Op] = Op.LIST_ENTRIES
    #: Inclusive (first, last) runs of held entries, ascending.
    runs: tuple[tuple[int, int], ...] = ()
    #: Where to continue (-1: the asked range is complete).
    next_first: int = -1
    #: The ledger is in limbo on that bookie (it may hold entries it does not know of).
    limbo: bool = False


def encode_list_entries(request_id: int, ledger_id: int, first: int, last: int) -> bytes:
    return pack_message(Op.LIST_ENTRIES, 0, request_id, _FIELDS.pack(ledger_id, first, last))


def decode_list_entries(
    body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int
) -> ListEntriesRequest:
    ledger_id, first, last = fixed_request("LIST_ENTRIES", _FIELDS, body, flags, at, end)
    if first < 0 or last < first:
        raise ProtocolError(f"LIST_ENTRIES range {first}..{last} is invalid (need 0 <= first <= last)")
    check_ledger("LIST_ENTRIES", ledger_id)
    return ListEntriesRequest(request_id, ledger_id, first, last)


def encode_list_entries_response(
    request_id: int,
    status: Status,
    ledger_id: int,
    *,
    limbo: bool = False,
    next_first: int = -1,
    runs: Sequence[tuple[int, int]] = (),
    message: str = "",
) -> bytes:
    """``runs``: inclusive ``(first, last)`` ranges of held entries, ascending."""
    table = np.array(list(runs), dtype=np.int64).reshape(-1, 2).tobytes() if runs else b""
    head = _RESPONSE.pack(ledger_id, limbo, next_first, len(runs))
    return pack_message(Op.LIST_ENTRIES, status, request_id, head, table, message.encode())


def decode_list_entries_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> ListEntriesResponse:
    ledger_id, limbo, next_first, count = _RESPONSE.unpack_from(body, at)
    table_at = at + _RESPONSE.size
    table_end = table_at + count * _RUN.itemsize
    if table_end > end:
        raise ProtocolError("LIST_ENTRIES response is shorter than its run count")
    runs = np.frombuffer(body, dtype=_RUN, count=count, offset=table_at)
    pairs = tuple(zip(runs["first"].tolist(), runs["last"].tolist()))
    return ListEntriesResponse(request_id, status, text(body, table_end, end), ledger_id, pairs, next_first, bool(limbo))
