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

Decoding is vectorised over the batch: the entries are joined once, the envelopes' flags,
timestamps and key lengths are gathered with numpy, and payloads (and keys) are cut out
of the joined bytes with one boolean mask — no Python object per field. Only records with
properties are decoded one by one (their lengths vary inside the envelope).

pyarrow is optional for bkframe (``pip install bkframe[arrow]``); this module imports it on
first use and says how to get it.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from bkframe.client.logs.envelope import EVENT_TIME, HEAD_SIZE, KEY, PROPERTIES, BadRecordError, decode
from bkframe.errors import BKError

if TYPE_CHECKING:
    import pyarrow as pa

#: Entry ids fit in 32 bits (a ledger's index takes at most 2**31 entries), so a position
#: packs into one sortable int64.
OFFSET_SHIFT = 32
_KNOWN = KEY | PROPERTIES | EVENT_TIME


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
    pa = pyarrow()
    n = len(raw)
    ids = np.fromiter(entry_ids, dtype=np.int64, count=n)
    if enveloped:
        payload, key, timestamp, properties = _decode_columns(pa, raw)
    else:
        payload = pa.array(raw, pa.binary())
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


def _empty_maps(pa: Any, n: int) -> pa.Array:
    return pa.MapArray.from_arrays(
        pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()), pa.array([], pa.string())
    )


def _binary(pa: Any, values: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64], valid: Any = None) -> pa.Array:
    """A binary array of consecutive ``lengths`` bytes of ``values``."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:  # a batch is a read chunk (16 MiB at most): never here
        raise ValueError(f"a batch of {offsets[-1]} bytes of one column is over Arrow's 2 GiB binary limit")
    validity = None
    null_count = 0
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        null_count = int((~valid).sum())
    buffers = [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(values)]
    return pa.Array.from_buffers(pa.binary(), len(lengths), buffers, null_count=null_count)


def _spans(starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Every byte index of the spans ``[start, start + length)`` (short spans: headers, keys)."""
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)


def _decode_columns(pa: Any, raw: Sequence[bytes]) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    n = len(raw)
    lengths = np.fromiter(map(len, raw), dtype=np.int64, count=n)
    if n and lengths.min() < HEAD_SIZE:
        i = int(np.argmax(lengths < HEAD_SIZE))
        raise BadRecordError(f"entry {i} of the batch is {lengths[i]} bytes, shorter than its {HEAD_SIZE}-byte envelope")
    joined = np.frombuffer(b"".join(raw), dtype=np.uint8)
    starts = np.cumsum(lengths) - lengths
    flags = joined[starts] if n else np.empty(0, dtype=np.uint8)
    if (flags & ~np.uint8(_KNOWN)).any():
        i = int(np.argmax(flags & ~np.uint8(_KNOWN)))
        raise BadRecordError(
            f"entry {i} of the batch has envelope flags {int(flags[i]):#04x} this bkframe does not know "
            f"(written by a newer one?); upgrade the reader"
        )
    timestamps = joined[(starts + 1)[:, None] + np.arange(8)].copy().view("<i8").ravel() if n else np.empty(0, np.int64)
    head = np.full(n, HEAD_SIZE, dtype=np.int64)
    keyed = (flags & KEY).astype(bool)
    key_starts = np.zeros(n, dtype=np.int64)
    key_lengths = np.zeros(n, dtype=np.int64)
    if keyed.any():
        at = starts[keyed] + HEAD_SIZE
        klen = joined[at[:, None] + np.arange(4)].copy().view("<u4").ravel().astype(np.int64)
        if (at + 4 + klen > starts[keyed] + lengths[keyed]).any():
            raise BadRecordError("a log entry's key length runs past its end")
        key_starts[keyed], key_lengths[keyed] = at + 4, klen
        head[keyed] += 4 + klen
    property_rows: list[list[tuple[str, str]]] | None = None
    with_properties = np.flatnonzero(flags & PROPERTIES)
    if with_properties.size:
        property_rows = [[] for _ in range(n)]
        for i in with_properties.tolist():
            payload, _key, _ts, props, _ev = decode(raw[i])
            head[i] = lengths[i] - len(payload)
            property_rows[i] = list(props.items())
    # Payloads: the joined bytes without every envelope (headers, keys, properties).
    keep = np.ones(joined.size, dtype=bool)
    keep[_spans(starts, head)] = False
    payload = _binary(pa, joined[keep], lengths - head)
    key = _binary(pa, joined[_spans(key_starts[keyed], key_lengths[keyed])], key_lengths, valid=keyed)
    timestamp = pa.array(timestamps, pa.timestamp("ms", tz="UTC"))
    if property_rows is None:
        properties = _empty_maps(pa, n)
    else:
        properties = pa.array(property_rows, pa.map_(pa.string(), pa.string()))
    return payload, key, timestamp, properties
