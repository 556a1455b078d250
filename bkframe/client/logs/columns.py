"""Log entries as Arrow columns: what a snapshot's ``to_arrow`` and the Spark connector build.

One record batch per run of entries of one segment, with the columns (in this order):

=============  =================================  ==========================================
``log``        string                             the log's name
``position``   string                             ``SEGMENT:ENTRY``, for people
``segment``    int64                              the segment number
``ledger_id``  int64                              the segment's ledger
``entry_id``   int64                              the entry id in that ledger
``payload``    binary                             the record's payload
``key``        binary, null when none             the record's key
``timestamp``  timestamp[ms, UTC], null when none the record's time (null in raw segments)
``properties`` map<string, string>                the record's properties (empty when none)
``offset``     int64                              ``segment << 32 | entry_id``: sorts as positions
=============  =================================  ==========================================

Decoding (:func:`decode_envelopes`, which the Spark connector uses too) is vectorised over
the batch and works on the entries where a range read left them (one buffer, each entry's
start and end; :class:`~bkframe.client.read_handle.EntryBlock`): the envelopes' flags,
timestamps and key lengths are gathered with numpy, and payloads and keys are cut out of
the buffer by one Arrow ``take`` each -- no Python object per field. Only records with
properties are decoded one by one (their lengths vary inside the envelope).

pyarrow is optional for bkframe (``pip install bkframe[arrow]``); this module imports it on
first use and says how to get it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import numpy.typing as npt

from bkframe.client.logs.envelope import EVENT_TIME, HEAD_SIZE, KEY, PROPERTIES, BadRecordError
from bkframe.core.interfaces import Buffer
from bkframe.errors import BKError

if TYPE_CHECKING:
    import pyarrow as pa

    from bkframe.client.read_handle import EntryBlock

#: Entry ids fit in 32 bits (a ledger's index takes at most 2**31 entries), so a position
#: packs into one sortable int64.
OFFSET_SHIFT = 32
_KNOWN = KEY | PROPERTIES | EVENT_TIME
_U32 = struct.Struct("<I")
_TIME_BYTES = np.arange(1, HEAD_SIZE)
_LENGTH_BYTES = np.arange(4)


class ArrowMissingError(BKError, ImportError):
    """pyarrow is not installed."""


def pyarrow() -> ModuleType:
    try:
        import pyarrow as pa_module
    except ImportError:
        raise ArrowMissingError(
            "reading a log as Arrow needs pyarrow: pip install 'bkframe[arrow]' (or pip install pyarrow)"
        ) from None
    return pa_module


def offset_of(segment: int, entry_id: int) -> int:
    """The ``offset`` column's value of a position (ordered as positions are)."""
    return segment << OFFSET_SHIFT | entry_id


def schema() -> pa.Schema:
    pa = pyarrow()
    return pa.schema(
        [
            pa.field("log", pa.string()),
            pa.field("position", pa.string()),
            pa.field("segment", pa.int64()),
            pa.field("ledger_id", pa.int64(), nullable=False),
            pa.field("entry_id", pa.int64(), nullable=False),
            pa.field("payload", pa.binary(), nullable=False),
            pa.field("key", pa.binary()),
            pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
            pa.field("properties", pa.map_(pa.string(), pa.string())),
            pa.field("offset", pa.int64()),
        ]
    )


def record_batch(
    log: str | None, segment: int | None, ledger_id: int, entry_ids: Sequence[int], raw: Sequence[bytes],
    *, enveloped: bool,
) -> pa.RecordBatch:
    """The columns of entries ``raw`` (ids ``entry_ids``) of one segment (``segment`` and
    ``log`` None: a ledger read on its own). ``enveloped``: the segment's entries are
    records in envelopes; else they are payloads only."""
    n = len(raw)
    lengths = np.fromiter(map(len, raw), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    ids = np.fromiter(entry_ids, dtype=np.int64, count=n)
    return block_batch(log, segment, ledger_id, ids, b"".join(raw), ends - lengths, ends, enveloped=enveloped)


def block_batch(
    log: str | None,
    segment: int | None,
    ledger_id: int,
    ids: npt.NDArray[np.int64],
    data: Buffer,
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    *,
    enveloped: bool,
) -> pa.RecordBatch:
    """:func:`record_batch` of the entries ``data[starts[i]:ends[i]]`` (an
    :class:`~bkframe.client.read_handle.EntryBlock`'s)."""
    pa = pyarrow()
    n = len(ids)
    if enveloped:
        rec = decode_envelopes(data, starts, ends, lambda i: f"entry {i} of the batch")
        payload, key = rec.payload, rec.key
        timestamp = pa.array(rec.millis, pa.timestamp("ms", tz="UTC"))
        properties = rec.properties(pa.map_(pa.string(), pa.string()))
    else:
        payload = payload_column(data, starts, ends)
        key = pa.nulls(n, pa.binary())
        timestamp = pa.nulls(n, pa.timestamp("ms", tz="UTC"))
        properties = _empty_maps(pa, n)
    if segment is None:
        log_col, position, segment_col, offset = (
            pa.nulls(n, pa.string()), pa.nulls(n, pa.string()), pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()),
        )
    else:
        log_col = pa.array([log] * n, pa.string())
        prefix = f"{segment}:"
        position = pa.array([prefix + str(i) for i in ids.tolist()], pa.string())
        segment_col = pa.array(np.full(n, segment, dtype=np.int64))
        offset = pa.array((np.int64(segment) << OFFSET_SHIFT) | ids)
    return pa.RecordBatch.from_arrays(
        [
            log_col, position, segment_col, pa.array(np.full(n, ledger_id, dtype=np.int64)), pa.array(ids),
            payload, key, timestamp, properties, offset,
        ],
        schema=schema(),
    )


def segment_batch(log: str, segment: int, ledger_id: int, block: EntryBlock, *, enveloped: bool) -> pa.RecordBatch:
    """:func:`block_batch` of a block read from one segment of a log; a record it cannot
    decode is named by its log, segment and the block's first entry."""
    try:
        return block_batch(
            log, segment, ledger_id, block.entry_ids, block.data, block.starts, block.ends, enveloped=enveloped
        )
    except BadRecordError as e:
        raise BadRecordError(f"log {log!r}: segment {segment}, entries {block.entry_ids[0]}..: {e}") from None


def _empty_maps(pa: Any, n: int, map_type: Any = None) -> pa.Array:
    return pa.MapArray.from_arrays(
        pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()), pa.array([], pa.string()), type=map_type
    )


@attrs.frozen(eq=False)
class Envelopes:
    """A batch of log records decoded into columns (:func:`decode_envelopes`)."""

    payload: pa.Array
    #: Null where a record has no key.
    key: pa.Array
    #: Each record's timestamp, milliseconds since the epoch.
    millis: npt.NDArray[np.int64]
    #: The properties as a map column's parts: record ``i``'s are ``names[o[i]:o[i + 1]]``
    #: and ``values[...]``, ``o`` = ``map_offsets``.
    map_offsets: npt.NDArray[np.int32]
    names: list[str]
    values: list[str]

    def properties(self, map_type: Any) -> pa.MapArray:
        """The properties as a map column of ``map_type`` (map<string, string>)."""
        pa = pyarrow()
        return pa.MapArray.from_arrays(
            pa.array(self.map_offsets), pa.array(self.names, pa.string()), pa.array(self.values, pa.string()), type=map_type
        )


def payload_column(data: Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> pa.Array:
    """A binary column of ``data[starts[i]:ends[i]]`` (one copy, in Arrow)."""
    pa = pyarrow()
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    return _cut(pa, data, np.stack([starts, ends], axis=1), 0, 2)


def _cut(pa: Any, data: Buffer, bounds: npt.NDArray[np.int64], pick: int, width: int) -> pa.Array:
    """Piece ``pick`` of each row of ``bounds`` (rows: ascending byte positions in ``data``
    that cut one entry into ``width - 1`` pieces, from its start to its end) as one binary
    column. The rows need not be in ``data``'s order (a striped read's): they are laid out
    in that order, with the gap to the next entry as one more piece, so that the pieces form
    one Arrow array over ``data`` (offsets must ascend) from which ``take`` copies the ones
    wanted, in the rows' order."""
    n = len(bounds)
    order = None
    if n > 1 and (np.diff(bounds[:, 0]) < 0).any():
        order = np.argsort(bounds[:, 0], kind="stable")
        bounds = bounds[order]
    edges = np.empty(n * width + 1, dtype=np.int64)
    table = edges[:-1].reshape(n, width)
    table[:, : width] = bounds
    edges[-1] = bounds[-1, -1]
    if edges[-1] >= 2**31:  # a batch is a read chunk (16 MiB at most): never here
        raise ValueError(f"a batch of {edges[-1]} bytes is over Arrow's 2 GiB binary limit")
    buffer = pa.py_buffer(data)
    pieces = pa.Array.from_buffers(pa.binary(), n * width, [None, pa.py_buffer(edges.astype(np.int32)), buffer])
    rank = np.arange(n, dtype=np.int64)
    if order is not None:
        rank[order] = np.arange(n, dtype=np.int64)
    return pieces.take(pa.array(rank * width + pick))


def decode_envelopes(
    data: Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], where: Callable[[int], str]
) -> Envelopes:
    """The records in envelopes ``data[starts[i]:ends[i]]`` as columns; ``where(i)`` names
    entry ``i`` in a :class:`BadRecordError`.

    One function on purpose: a batch's envelopes are checked and cut in one vectorized pass over
    the same arrays (starts, flags, key bounds); split, each part would take and return the
    others' arrays.
    """
    pa = pyarrow()
    n = len(starts)
    raw = np.frombuffer(data, dtype=np.uint8)
    short = np.flatnonzero(ends - starts < HEAD_SIZE)
    if short.size:
        i = int(short[0])
        raise BadRecordError(
            f"{where(i)}: a log entry of {ends[i] - starts[i]} bytes is shorter than its {HEAD_SIZE}-byte envelope"
        )
    if n == 0:
        empty = pa.array([], pa.binary())
        return Envelopes(empty, empty, np.empty(0, np.int64), np.zeros(1, np.int32), [], [])
    flags = raw[starts]
    unknown = np.flatnonzero(flags & ~np.uint8(_KNOWN))
    if unknown.size:
        i = int(unknown[0])
        raise BadRecordError(
            f"{where(i)}: a log entry has envelope flags {int(flags[i]):#04x} this bkframe does not know "
            "(written by a newer one?); upgrade the reader"
        )
    # Eight bytes after each entry's flags, gathered into one little-endian int64 array.
    millis = raw[starts[:, None] + _TIME_BYTES].view("<i8").reshape(n)
    if not (flags & (KEY | PROPERTIES)).any():  # the usual batch: head, then payload
        payload = _cut(pa, data, np.stack([starts, starts + HEAD_SIZE, ends], axis=1), 1, 3)
        return Envelopes(payload, pa.nulls(n, pa.binary()), millis, np.zeros(n + 1, np.int32), [], [])
    has_key = (flags & KEY) != 0
    key_start = starts + HEAD_SIZE + 4 * has_key
    key_len = np.zeros(n, dtype=np.int64)
    keyed = np.flatnonzero(has_key)
    if keyed.size:
        short = keyed[ends[keyed] < key_start[keyed]]
        if short.size:
            raise BadRecordError(f"{where(int(short[0]))}: a log entry's envelope runs past its end")
        key_len[keyed] = raw[(starts[keyed] + HEAD_SIZE)[:, None] + _LENGTH_BYTES].view("<u4").reshape(keyed.size)
    key_end = key_start + key_len
    past = np.flatnonzero(key_end > ends)
    if past.size:
        i = int(past[0])
        raise BadRecordError(f"{where(i)}: a log entry's key length {key_len[i]} runs past its end ({ends[i] - starts[i]} bytes)")
    payload_start = key_end.copy()
    counts = np.zeros(n, dtype=np.int32)
    names: list[str] = []
    values: list[str] = []
    view = memoryview(data)
    for i in np.flatnonzero(flags & PROPERTIES).tolist():
        before = len(names)
        s = int(starts[i])
        entry = bytes(view[s : int(ends[i])])
        try:
            payload_start[i] = s + _properties(entry, int(key_end[i]) - s, names, values)
        except (struct.error, UnicodeDecodeError, ValueError) as e:
            raise BadRecordError(f"{where(i)}: a log entry's properties do not decode ({e})") from None
        counts[i] = len(names) - before
    # Each entry cut into head, key, properties, payload: one take for the payloads, one for the keys.
    bounds = np.stack([starts, key_start, key_end, payload_start, ends], axis=1)
    payload = _cut(pa, data, bounds, 3, 5)
    keys = pc().if_else(pa.array(has_key), _cut(pa, data, bounds, 1, 5), pa.scalar(None, pa.binary()))
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=map_offsets[1:])
    return Envelopes(payload, keys, millis, map_offsets, names, values)


def pc() -> ModuleType:
    import pyarrow.compute as compute

    return compute


def _properties(entry: bytes, at: int, names: list[str], values: list[str]) -> int:
    """Append the properties that start at ``at`` in ``entry`` (u32 count, then per property
    u32 length and UTF-8 name, u32 length and UTF-8 value) to ``names`` and ``values``;
    return where they end (the payload's start)."""
    (count,) = _U32.unpack_from(entry, at)
    at += 4
    if count * 8 > len(entry) - at:
        raise ValueError(f"{count} properties cannot fit in {len(entry)} bytes")
    for _ in range(count):
        (n,) = _U32.unpack_from(entry, at)
        name_end = at + 4 + n
        (m,) = _U32.unpack_from(entry, name_end)
        value_end = name_end + 4 + m
        if value_end > len(entry):
            raise ValueError("a property runs past the entry's end")
        names.append(entry[at + 4 : name_end].decode())
        values.append(entry[name_end + 4 : value_end].decode())
        at = value_end
    return at
