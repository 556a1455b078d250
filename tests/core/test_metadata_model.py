from __future__ import annotations

import pytest

from bkframe import DigestType, LedgerMetadata, LedgerStateName


def test_quorum_validation() -> None:
    LedgerMetadata(1, 3, 3, 3, ((0, ("a", "b", "c")),))
    for e, w, a in [(2, 3, 1), (3, 2, 3), (3, 2, 0)]:
        with pytest.raises(ValueError, match="E >= W >= A >= 1"):
            LedgerMetadata(1, e, w, a, ((0, tuple("abc"[:e])),))


def test_fragment_validation() -> None:
    with pytest.raises(ValueError, match="first fragment must start at entry 0"):
        LedgerMetadata(1, 2, 2, 1, ((5, ("a", "b")),))
    with pytest.raises(ValueError, match="strictly increasing"):
        LedgerMetadata(1, 2, 2, 1, ((0, ("a", "b")), (0, ("a", "c"))))
    with pytest.raises(ValueError, match="ensemble size is 3"):
        LedgerMetadata(1, 3, 2, 1, ((0, ("a", "b")),))
    with pytest.raises(ValueError, match="names a bookie twice"):
        LedgerMetadata(1, 2, 2, 1, ((0, ("a", "a")),))


def test_round_trip_and_ensemble_at() -> None:
    md = LedgerMetadata(
        9, 2, 2, 1, ((0, ("a", "b")), (10, ("a", "c"))), ledger_type="PD_JOURNAL",
        digest_type=DigestType.HMAC_SHA256, state=LedgerStateName.CLOSED, last_entry_id=20, length=99,
        custom={"k": "v"}, version=4,
    )
    assert LedgerMetadata.deserialize(md.serialize(), 4) == md
    assert md.ensemble_at(0) == ("a", "b") and md.ensemble_at(9) == ("a", "b")
    assert md.ensemble_at(10) == ("a", "c") and md.ensemble_at(500) == ("a", "c")
    assert md.bookies() == {"a", "b", "c"}
