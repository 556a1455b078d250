"""A READ_BATCH answer's entries checked in bulk: as many as verify, from the first; every
digest checked (CRC32C and HMAC), and the ids in each entry's header."""

from __future__ import annotations

import numpy as np
import pytest

from bkframe import DigestType
from bkframe.client.entry_format import Digester


def batch(digester: Digester, ledger_id: int, ids: list[int]) -> tuple[bytearray, np.ndarray, np.ndarray]:
    entries = [digester.encode(ledger_id, i, i - 1, 10 * (i + 1), b"payload-%d" % i * 5) for i in ids]
    lengths = np.array([len(e) for e in entries], dtype=np.int64)
    ends = np.cumsum(lengths) + 3  # not at the buffer's start, as in a response
    return bytearray(b"xyz" + b"".join(entries)), ends - lengths, ends


@pytest.mark.parametrize("digest", [DigestType.CRC32C, DigestType.HMAC_SHA256])
def test_a_batch_verifies_up_to_its_first_bad_entry(digest: DigestType) -> None:
    d = Digester.for_ledger(digest, b"pw")
    ids = np.arange(10, 20, dtype=np.int64)
    data, starts, ends = batch(d, 7, ids.tolist())
    assert d.verify_batch(7, bytes(data), starts, ends, ids) == (10, 18)
    payload = bytes(data[starts[0] + d.header_size : ends[0]])
    assert d.decode(7, 10, bytes(data[starts[0] : ends[0]]))[2] == payload
    # A flipped payload byte in entry 14: the four before it are good.
    flipped = bytearray(data)
    flipped[ends[4] - 1] ^= 1
    assert d.verify_batch(7, bytes(flipped), starts, ends, ids) == (4, 12)
    # A flipped digest byte of the first entry: none is.
    flipped = bytearray(data)
    flipped[starts[0] + 33] ^= 1
    assert d.verify_batch(7, bytes(flipped), starts, ends, ids) == (0, -1)
    # Another ledger's entries, or entries that are not the ones asked for.
    assert d.verify_batch(8, bytes(data), starts, ends, ids)[0] == 0
    assert d.verify_batch(7, bytes(data), starts, ends, ids + (np.arange(10) >= 6))[0] == 6
    # An entry shorter than its header.
    short = ends.copy()
    short[2] = starts[2] + d.header_size - 1
    assert d.verify_batch(7, bytes(data), starts, short, ids)[0] == 2


def test_an_hmac_batch_without_the_password_checks_ids_only() -> None:
    d = Digester.for_ledger(DigestType.HMAC_SHA256, b"pw")
    ids = np.arange(5, dtype=np.int64)
    data, starts, ends = batch(d, 1, ids.tolist())
    data[ends[1] - 1] ^= 1
    assert Digester.unkeyed(DigestType.HMAC_SHA256).verify_batch(1, bytes(data), starts, ends, ids)[0] == 5
    assert d.verify_batch(1, bytes(data), starts, ends, ids)[0] == 1
