"""READ_BATCH: entries ``first, first + step, ...`` up to ``last`` of one ledger in one
answer (range reads, and the entries a bookie holds of a striped ledger)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import ClassVar

import attrs
import numpy as np
import numpy.typing as npt

from bkframe.core.interfaces import Buffer
from bkframe.errors import ProtocolError
from bkframe.proto.base import LedgerReply, LedgerRequest, check_ledger, text
from bkframe.proto.codes import BATCH_DIRECTORY, MAX_MASTER_KEY, MAX_READ_BATCH, Op, Status
from bkframe.proto.frames import message_head, pack_message

_FIELDS = struct.Struct("<QqqIIH")  # ledger, first, last, max bytes, step, key_len (then the key)
_RESPONSE = struct.Struct("<QqI")  # ledger, lac, count (then directory, entries, message)


@attrs.frozen
class ReadBatchRequest(LedgerRequest):
    """The bookie sends the entries it holds from ``first`` on, in order, stopping before
    the first it lacks or once about ``max_bytes`` are in the answer (always at least one
    entry if it holds ``first``). ``master_key``: the ledger's, as READ carries it (a
    keyless read is served only to a principal allowed to read every ledger)."""

    first: int
    last: int
    max_bytes: int
    step: int = 1
    master_key: bytes = attrs.field(default=b"", repr=False)


@attrs.frozen(eq=False)
class BatchEntries:
    """A READ_BATCH response's entries where they arrived: entry ``entry_ids[i]`` is
    ``data[starts[i]:ends[i]]``. No object per entry: a range read checks and cuts them
    with array operations (1 KiB entries are read at hundreds of thousands a second)."""

    entry_ids: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]
    data: bytes | memoryview

    def __len__(self) -> int:
        return len(self.entry_ids)

    def pairs(self) -> tuple[tuple[int, bytes], ...]:
        data = self.data
        return tuple(
            (i, bytes(data[s:e])) for i, s, e in zip(self.entry_ids.tolist(), self.starts.tolist(), self.ends.tolist())
        )


@attrs.frozen
class ReadBatchResponse(LedgerReply):
    op: ClassVar[Op] = Op.READ_BATCH
    #: The bookie's LAC of the ledger.
    lac: int = -1
    #: The entries sent, in order (None when there are none).
    batch: BatchEntries | None = None

    @property
    def entries(self) -> tuple[tuple[int, bytes], ...]:
        """The entries sent, in order, as (entry id, entry): one object per entry; range
        reads use :attr:`batch` as it is."""
        return self.batch.pairs() if self.batch is not None else ()


def encode_read_batch(
    request_id: int, ledger_id: int, first: int, last: int, max_bytes: int, step: int = 1, *, master_key: bytes = b""
) -> bytes:
    fields = _FIELDS.pack(ledger_id, first, last, max_bytes, step, len(master_key))
    return pack_message(Op.READ_BATCH, 0, request_id, fields, master_key)


def decode_read_batch(
    body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int
) -> ReadBatchRequest:
    if flags or end - at < _FIELDS.size:
        raise ProtocolError("READ_BATCH message is too short or has unknown flags")
    ledger_id, first, last, max_bytes, step, key_len = _FIELDS.unpack_from(body, at)
    key_at = at + _FIELDS.size
    if key_len > MAX_MASTER_KEY or key_at + key_len != end:
        raise ProtocolError(f"READ_BATCH master key length {key_len} does not match the message")
    if first < 0 or last < first or last - first >= MAX_READ_BATCH or max_bytes == 0 or step == 0:
        raise ProtocolError(
            f"READ_BATCH of {first}..{last} step {step} ({max_bytes} bytes) is invalid "
            f"(need 0 <= first <= last < first + {MAX_READ_BATCH}, step > 0, max bytes > 0)"
        )
    check_ledger("READ_BATCH", ledger_id)
    return ReadBatchRequest(request_id, ledger_id, first, last, max_bytes, step, bytes(body[key_at:end]))


def encode_read_batch_response(
    request_id: int,
    status: Status,
    ledger_id: int,
    lac: int,
    entry_ids: Sequence[int] = (),
    entries: Sequence[Buffer] = (),
    message: str = "",
) -> list[Buffer]:
    """Parts of a READ_BATCH response (entries are not copied)."""
    directory = np.empty(len(entry_ids), dtype=BATCH_DIRECTORY)
    directory["entry_id"] = entry_ids
    directory["length"] = [len(e) for e in entries]
    note = message.encode()
    size = _RESPONSE.size + directory.nbytes + int(directory["length"].sum()) + len(note)
    head = message_head(size, Op.READ_BATCH, status, request_id) + _RESPONSE.pack(ledger_id, lac, len(entry_ids))
    return [head + directory.tobytes(), *entries, note]


def decode_read_batch_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> ReadBatchResponse:
    ledger_id, lac, count = _RESPONSE.unpack_from(body, at)
    dir_at = at + _RESPONSE.size
    data_at = dir_at + count * BATCH_DIRECTORY.itemsize
    if data_at > end:
        raise ProtocolError("READ_BATCH response is shorter than its entry count")
    directory = np.frombuffer(body, dtype=BATCH_DIRECTORY, count=count, offset=dir_at)
    # Where each entry is, as arrays: no object per entry (see BatchEntries).
    ends = np.cumsum(directory["length"], dtype=np.int64) + data_at
    pos = int(ends[-1]) if count else data_at
    if pos > end:
        raise ProtocolError("READ_BATCH response entry lengths overrun the message")
    starts = ends - directory["length"]
    batch = BatchEntries(directory["entry_id"].astype(np.int64), starts, ends, body) if count else None
    return ReadBatchResponse(request_id, status, text(body, pos, end), ledger_id, lac, batch)
