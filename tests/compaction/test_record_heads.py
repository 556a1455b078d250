"""Compaction reads each record's key, emptiness and time off its envelope in place
(``compactor._heads``): the same answers as the full decode, for every kind of record."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bkframe import BKError, EntryBlock, Record
from bkframe.client.logs import envelope
from bkframe.client.read_handle import Entry
from bkframe.compaction.compactor import _heads


def _records(rng: random.Random, n: int) -> list[Record]:
    out = []
    for i in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 20))
        payload = b"" if rng.random() < 0.2 else rng.randbytes(rng.randrange(1, 200))
        properties = {"p": str(i), "q": "é"} if rng.random() < 0.3 else None
        out.append(Record(payload, key, 1_764_000_000_000 + i, properties))
    return out


def test_heads_agree_with_the_full_decode() -> None:
    rng = random.Random(3)
    entries = [envelope.encode_record(r) for r in _records(rng, 500)]
    block = EntryBlock.of(7, [Entry(7, i, e) for i, e in enumerate(entries)])
    got, keys = _heads(block)
    decoded = [envelope.decode(e) for e in entries]
    assert keys == [d[1] for d in decoded if d[1] is not None]
    assert got.keyed.tolist() == [d[1] is not None for d in decoded]
    assert got.tombstone.tolist() == [d[1] is not None and not d[0] for d in decoded]
    assert got.millis.tolist() == [d[2] for d in decoded]
    assert np.array_equal(got.sizes, np.array([len(e) for e in entries]))


def test_a_damaged_envelope_is_an_error_not_a_guess() -> None:
    good = envelope.encode_record(Record(b"x", b"key"))
    head = envelope.HEAD_SIZE
    cases = {
        good[:5]: "shorter than an envelope",
        bytes([0x80]) + good[1:]: "does not know",
        good[:head] + b"\xff\xff\xff\x7f" + good[head + 4 :]: "its key runs past its end",
    }
    for bad, said in cases.items():
        with pytest.raises(BKError, match=said):
            _heads(EntryBlock.of(7, [Entry(7, 0, bad)]))
