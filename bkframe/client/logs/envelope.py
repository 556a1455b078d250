"""A log entry's envelope: an optional key, a timestamp and properties around the payload.

The ledger layer stores opaque bytes; the envelope belongs to named logs. Every entry of a
segment whose ``format`` is :data:`FORMAT_ENVELOPE` (every segment a log writer or a Spark
write makes; see :class:`~bkframe.client.logs.model.Segment`) is, little endian::

    offset 0   u8    flags     bit 0 KEY, bit 1 PROPERTIES, bit 2 EVENT_TIME; bits 3-7 are 0
    offset 1   i64   timestamp milliseconds since the Unix epoch: the writer's event time
                               (EVENT_TIME set) or the time the writer appended it
    offset 9   if KEY:         u32 key length, then the key's bytes
               if PROPERTIES:  u32 count, then per property: u32 name length, the name
                               (UTF-8), u32 value length, the value (UTF-8)
    then       the payload: every byte up to the entry's end

An entry without key and properties costs 9 bytes more than its payload. A segment of
format :data:`FORMAT_RAW` (written before envelopes existed) holds payloads only: its
entries read with no key, no properties and no timestamp. A reader refuses an entry whose
flags it does not know (a newer format) or whose lengths run past its end, naming it.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Mapping
from types import MappingProxyType

import attrs

from bkframe.errors import BKError

#: Segment formats (:attr:`~bkframe.client.logs.model.Segment.format`).
FORMAT_RAW = 0
FORMAT_ENVELOPE = 1

#: Custom metadata of a ledger written for a log: its entries' format (``"1"``:
#: envelopes); :meth:`~bkframe.client.logs.api.Logs.commit_ledgers` reads it.
FORMAT_KEY = "bkframe.log.format"
#: ``{FORMAT_KEY: ...}`` in the custom metadata of a ledger whose entries are envelopes
#: (public as ``bkframe.ENVELOPE_CUSTOM``: merge it into ``create_ledger(custom=...)``).
ENVELOPE_CUSTOM: Mapping[str, str] = MappingProxyType({FORMAT_KEY: "1"})

KEY = 0x01
PROPERTIES = 0x02
EVENT_TIME = 0x04
_KNOWN = KEY | PROPERTIES | EVENT_TIME

_HEAD = struct.Struct("<Bq")
_U32 = struct.Struct("<I")
#: Bytes an envelope adds to an entry with no key and no properties.
HEAD_SIZE = _HEAD.size

#: No properties (shared: an entry without any carries this one).
NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})


class BadRecordError(BKError, ValueError):
    """An entry of an envelope segment does not decode (corrupt, or a newer format)."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.frozen
class Record:
    """What to append to a log: a payload with an optional ``key``, ``timestamp`` (ms since
    the epoch, the event time; default: when it is appended) and ``properties``."""

    payload: bytes
    key: bytes | None = None
    timestamp: int | None = None
    properties: Mapping[str, str] | None = None


def _encode_properties(properties: Mapping[str, str]) -> list[bytes]:
    parts = [_U32.pack(len(properties))]
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"log record properties map str to str, got {name!r}: {value!r}")
        n, v = name.encode(), value.encode()
        parts += (_U32.pack(len(n)), n, _U32.pack(len(v)), v)
    return parts


def encode(
    payload: bytes,
    key: bytes | None = None,
    timestamp: int | None = None,
    properties: Mapping[str, str] | None = None,
    *,
    now: int | None = None,
) -> bytes:
    """The entry for one record. ``now``: the publish time to use when ``timestamp`` is
    None (default: the clock now)."""
    flags = 0
    if timestamp is None:
        timestamp = now if now is not None else now_ms()
    else:
        flags = EVENT_TIME
    if key is None and not properties:
        return _HEAD.pack(flags, timestamp) + payload
    parts: list[bytes] = []
    if key is not None:
        flags |= KEY
        parts += (_U32.pack(len(key)), bytes(key))
    if properties:
        flags |= PROPERTIES
        parts += _encode_properties(properties)
    return b"".join((_HEAD.pack(flags, timestamp), *parts, payload))


def head(timestamp: int) -> bytes:
    """The envelope of a record without key or properties, appended at ``timestamp``:
    such an entry is this followed by its payload."""
    return _HEAD.pack(0, timestamp)


def encode_record(record: Record | bytes, *, now: int | None = None) -> bytes:
    """The entry a log writer makes of ``record`` (a :class:`Record` or a bare payload):
    what a ledger written for :meth:`~bkframe.client.logs.api.Logs.commit_ledgers` holds.
    ``now``: the publish time (ms) of a record without a timestamp (default: the clock)."""
    if isinstance(record, Record):
        return encode(record.payload, record.key, record.timestamp, record.properties, now=now)
    return _HEAD.pack(0, now if now is not None else now_ms()) + record


def timestamp_of(entry: bytes) -> int:
    """The timestamp of an envelope entry (for seeking: nothing else is decoded)."""
    if len(entry) < HEAD_SIZE:
        raise BadRecordError(f"a log entry of {len(entry)} bytes is shorter than its {HEAD_SIZE}-byte envelope")
    return int(_HEAD.unpack_from(entry)[1])


@attrs.frozen
class DecodedRecord:
    """What :func:`decode_record` finds in an entry: the payload and the envelope's fields."""

    payload: bytes
    key: bytes | None
    timestamp: int
    properties: Mapping[str, str]
    event_time: bool


def decode_record(entry: bytes) -> DecodedRecord:
    """The record in an entry of an envelope segment (:func:`encode_record`'s inverse);
    :class:`BadRecordError` if it does not decode."""
    return DecodedRecord(*decode(entry))


def decode(entry: bytes) -> tuple[bytes, bytes | None, int, Mapping[str, str], bool]:
    """(payload, key, timestamp, properties, event_time) of an envelope entry."""
    size = len(entry)
    if size < HEAD_SIZE:
        raise BadRecordError(f"a log entry of {size} bytes is shorter than its {HEAD_SIZE}-byte envelope")
    flags, timestamp = _HEAD.unpack_from(entry)
    if not flags:
        return entry[HEAD_SIZE:], None, timestamp, NO_PROPERTIES, False
    if flags & ~_KNOWN:
        raise BadRecordError(
            f"a log entry has envelope flags {flags:#04x} this bkframe does not know (written by a newer one?); "
            f"upgrade the reader"
        )
    at = HEAD_SIZE
    key = None
    properties: Mapping[str, str] = NO_PROPERTIES
    try:
        if flags & KEY:
            (n,) = _U32.unpack_from(entry, at)
            at += 4
            if at + n > size:
                raise BadRecordError(f"a log entry's key length {n} runs past its end ({size} bytes)")
            key = entry[at : at + n]
            at += n
        if flags & PROPERTIES:
            (count,) = _U32.unpack_from(entry, at)
            at += 4
            # Each property takes at least 8 bytes: a count beyond that is corrupt, not a reason to loop.
            if count * 8 > size - at:
                raise BadRecordError(f"a log entry says it has {count} properties; its {size} bytes cannot hold them")
            found: dict[str, str] = {}
            for _ in range(count):
                texts = []
                for _part in (0, 1):
                    (n,) = _U32.unpack_from(entry, at)
                    at += 4
                    if at + n > size:
                        raise BadRecordError(f"a log entry's property runs past its end ({size} bytes)")
                    texts.append(entry[at : at + n].decode())
                    at += n
                found[texts[0]] = texts[1]
            properties = found
    except struct.error:
        raise BadRecordError(f"a log entry's envelope runs past its end ({size} bytes)") from None
    except UnicodeDecodeError as e:
        raise BadRecordError(f"a log entry's property is not UTF-8: {e}") from None
    return entry[at:], key, timestamp, properties, bool(flags & EVENT_TIME)


def overhead(key: bytes | None, properties: Mapping[str, str] | None) -> int:
    """Bytes the envelope adds to a payload with this key and these properties."""
    extra = HEAD_SIZE
    if key is not None:
        extra += 4 + len(key)
    if properties:
        extra += 4 + sum(8 + len(k.encode()) + len(v.encode()) for k, v in properties.items())
    return extra
