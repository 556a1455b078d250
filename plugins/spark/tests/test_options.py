"""The data source's options: every mistake is one clear error naming the option (no Spark)."""

from __future__ import annotations

import pytest
from bkframe_spark import BkframeDataSource, OptionError, Options
from bkframe_spark.reading import EntryRange, split
from bkframe_spark.source import narrow
from bkframe_spark.writing import DataError, payload_index
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from bkframe import EARLIEST, LATEST, Position

M = "sqlite:///tmp/nowhere/metadata.db"


def test_defaults_and_case_insensitive_keys() -> None:
    opts = Options.parse({"metadata": M, "log": "events", "startingPosition": "3:41", "MAXENTRIESPERTRIGGER": "500"})
    assert opts.log == "events"
    assert opts.starting == Position(3, 41)
    assert opts.max_entries_per_trigger == 500
    assert opts.ledger_type == "VD_JOURNAL"
    assert opts.fail_on_data_loss is True
    assert opts.create_log is True
    assert Options.parse({"metadata": M, "log": "e", "startingPosition": "earliest"}).starting == EARLIEST
    assert Options.parse({"metadata": M, "log": "e", "endingPosition": "latest"}).ending == LATEST


def test_metadata_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BKFRAME_METADATA", raising=False)
    with pytest.raises(OptionError, match="needs option 'metadata'"):
        Options.parse({"log": "events"})
    monkeypatch.setenv("BKFRAME_METADATA", M)
    assert Options.parse({"log": "events"}).metadata == M


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"log": "e", "maxEntriesPerTriger": "5"}, r"unknown option\(s\) \['maxentriespertriger'\]"),
        ({"log": "e", "startingPosition": "three"}, "option 'startingposition'"),
        ({"log": "e", "endingPosition": "earliest"}, "not 'earliest'"),
        ({"log": "e", "entriesPerPartition": "0"}, "'entriesperpartition' must be a whole number >= 1"),
        ({"log": "e", "maxEntriesPerTrigger": "many"}, "'maxentriespertrigger' must be a whole number"),
        ({"log": "e", "failOnDataLoss": "yes"}, "'failondataloss' must be true or false"),
        ({"log": "e", "timeoutSeconds": "-1"}, "'timeoutSeconds' must be a number of seconds > 0"),
        ({"log": "e", "ledgers": "1,2"}, "not both"),
        ({"ledgers": "1,x"}, "option 'ledgers' must list ledger ids"),
        ({"ledgers": "1", "startingPosition": "0:0"}, "are for logs"),
        ({"log": "bad name!"}, "option 'log'"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        Options.parse({"metadata": M, **options})


def test_overwrite_and_complete_mode_are_refused_with_what_to_do() -> None:
    schema = StructType([StructField("payload", BinaryType())])
    source = BkframeDataSource({"metadata": M, "log": "e"})
    with pytest.raises(OptionError, match=r"append-only; use \.mode\('append'\)"):
        source.writer(schema, True)
    with pytest.raises(OptionError, match=r"outputMode\('append'\)"):
        source.streamWriter(schema, True)


def test_payload_column_must_be_bytes_or_text() -> None:
    assert payload_index(StructType([StructField("id", LongType()), StructField("Payload", BinaryType())])) == 1
    with pytest.raises(DataError, match="writes the column 'payload'"):
        payload_index(StructType([StructField("id", LongType())]))
    with pytest.raises(DataError, match="is bigint"):
        payload_index(StructType([StructField("payload", LongType())]))


def test_partitions_cut_by_entries_and_bytes() -> None:
    parts = split([EntryRange("e", 0, 7, 0, 99, 0), EntryRange("e", 1, 8, 0, 9, 1000)], 30, 4000)
    assert [(p.ledger_id, p.first, p.last) for p in parts] == [
        (7, 0, 29), (7, 30, 59), (7, 60, 89), (7, 90, 99), (8, 0, 3), (8, 4, 7), (8, 8, 9)
    ]


def test_pushed_filters_prune_segments_and_entry_ranges() -> None:
    parts = [EntryRange("e", s, 10 + s, 0, 99) for s in range(4)]
    got = narrow(parts, [("segment", ">=", (1,)), ("segment", "<", (3,)), ("entry_id", ">", (49,))])
    assert [(p.segment, p.first, p.last) for p in got] == [(1, 50, 99), (2, 50, 99)]
    assert narrow(parts, [("ledger_id", "in", (12,)), ("entry_id", "in", (5, 7))]) == [EntryRange("e", 2, 12, 5, 7)]
    assert narrow(parts, [("entry_id", "=", (500,))]) == []
