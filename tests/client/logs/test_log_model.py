"""The named-log model on its own: positions, the record's encoding, retention decisions."""

from __future__ import annotations

import attrs
import pytest

from bkframe import Cursor, LogMetadata, LogSettings, Position, Segment, check_name, parse_where
from bkframe.client.logs.model import TOKEN_HISTORY, Commit
from bkframe.client.logs.retention import segments_to_trim
from bkframe.tiering.offload_record import Offload


def test_positions_order_print_and_parse() -> None:
    assert Position(3, 41) < Position(3, 42) < Position(4, 0) < Position(10, 0)
    assert str(Position(3, 41)) == "3:41" and Position.parse(" 3:41 ") == Position(3, 41)
    assert Position(3, 41).next() == Position(3, 42)
    assert sorted([Position(2, 5), Position(0, 9), Position(2, 0)]) == [Position(0, 9), Position(2, 0), Position(2, 5)]
    for bad in ("3", "3:", "a:1", "-1:0", "1:-2", "1:2:3"):
        with pytest.raises(ValueError, match="SEGMENT:ENTRY"):
            Position.parse(bad)
    assert parse_where("earliest") == "earliest" and parse_where("LATEST") == "latest"
    assert parse_where("0:7") == Position(0, 7)


def test_names_are_checked() -> None:
    assert check_name("orders.eu-1_b") == "orders.eu-1_b"
    for bad in ("", "a/b", ".hidden", "x" * 201, "spaces no"):
        with pytest.raises(ValueError, match="bad log name"):
            check_name(bad)


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="E >= W >= A"):
        LogSettings(ensemble=2, write_quorum=3)
    with pytest.raises(ValueError):
        LogSettings(rollover_entries=0)
    with pytest.raises(ValueError, match="retention_s"):
        LogSettings(retention_s=0)


def _record(*segments: Segment, **kw: object) -> LogMetadata:
    return LogMetadata(
        name="l", settings=LogSettings(), uid="u", segments=segments,
        next_segment=segments[-1].number + 1 if segments else 0, **kw,  # type: ignore[arg-type]
    )


def test_record_round_trips_and_remembers_a_bounded_number_of_tokens() -> None:
    rec = _record(Segment(0, 11, True, 9, 100, 1.0, 2.0), Segment(1, 12), writer="w", writer_epoch=3, spares=(13,))
    for i in range(TOKEN_HISTORY + 5):
        rec = rec.with_commit(Commit(f"t{i}", 2, 1, 3.0))
    back = LogMetadata.deserialize(rec.serialize(), 7)
    assert back == attrs.evolve(rec, version=7)
    assert len(back.commits) == TOKEN_HISTORY and back.commit("t4") is None and back.commit(f"t{TOKEN_HISTORY + 4}")
    assert back.ledger_ids() == {11, 12, 13}
    cursor = Cursor("l", "c", Position(1, 5), "u", 5.0, 2)
    assert Cursor.deserialize("l", "c", cursor.serialize(), 2) == cursor


def test_segments_to_trim_respects_open_segments_and_cursors() -> None:
    segs = (
        Segment(0, 1, True, 9, 100, 0, 10.0),
        Segment(1, 2, True, 9, 100, 0, 20.0),
        Segment(2, 3, True, 9, 100, 0, 30.0),
        Segment(3, 4, False),
        Segment(4, 5, True, 9, 100, 0, 40.0),  # committed after the open one
    )
    rec = _record(*segs)

    def trim(before: Position | None = None, cursor: Position | None = None, force: bool = False, **settings: object) -> int:
        r = attrs.evolve(rec, settings=attrs.evolve(rec.settings, **settings)) if settings else rec
        return segments_to_trim(r, before=before, use_retention=bool(settings), slowest_cursor=cursor, force=force, now=100.0)

    # By position: whole segments whose every entry is before it.
    assert trim(Position(2, 0)) == 2 and trim(Position(1, 9)) == 1 and trim(Position(1, 10)) == 2
    # Never the open segment, nor anything after it.
    assert trim(Position(9, 0)) == 3
    # By age (closed_at older than now - retention_s) and by size (the oldest go first).
    assert trim(retention_s=75.0) == 2 and trim(retention_bytes=250) == 2 and trim(retention_bytes=1000) == 0
    # A cursor holds retention back unless forced.
    assert trim(Position(3, 0), cursor=Position(1, 3)) == 1
    assert trim(Position(3, 0), cursor=Position(1, 3), force=True) == 3
    assert trim(retention_s=1.0, cursor=Position(0, 0)) == 0


def test_offloads_are_appended_to_a_segment_and_offload_settings_stored_only_when_set() -> None:
    plain = Segment(3, 41, True, 9, 1000, 1.0, 2.0, 9, 1, 5, 6)
    assert len(plain.to_json()) == 11  # a record without offloads is what it was before
    where = Offload("file:///srv/tier", "segments/u/0000000003-41.parquet", 2048, 10, 0xABC, 0xDEF, 3.0)
    offloaded = attrs.evolve(plain, offload=where)
    assert offloaded.to_json()[:11] == plain.to_json() and Segment.from_json(offloaded.to_json()) == offloaded
    record = LogMetadata("events", LogSettings(), segments=(offloaded,))
    assert LogMetadata.deserialize(record.serialize(), 1).segments == (offloaded,)
    assert "offload" not in str(LogSettings().to_json())  # older releases read logs that do not use them
    settings = LogSettings(offload_after_s=3600.0, offload_beyond_bytes=1 << 30)
    assert LogSettings.from_json(settings.to_json()) == settings
    with pytest.raises(ValueError, match="offload_after_s"):
        LogSettings(offload_after_s=0)
    with pytest.raises(ValueError, match="not known to this bkframe"):
        LogSettings.from_json({**LogSettings().to_json(), "from_the_future": 1})
