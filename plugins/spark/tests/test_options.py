"""The data source's options: every mistake is one clear error naming the option (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bkframe_spark import BkframeDataSource, OptionError, Options
from bkframe_spark.logsets import OffsetError, fair_shares, offset, positions_of
from bkframe_spark.options import KNOWN, NAMES
from bkframe_spark.reading import SCHEMA, EntryRange, split
from bkframe_spark.source import narrow
from bkframe_spark.streaming import LogStreamReader, after, fitting
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows
from pyspark.sql.types import BinaryType, StructField, StructType

from bkframe import EARLIEST, LATEST, Position, SegmentRange
from bkframe.errors import NoSuchLogError

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
        ({"log": "e", "startingPosition": "three"}, "option 'startingPosition'"),
        ({"log": "e", "endingPosition": "earliest"}, "not 'earliest'"),
        ({"log": "e", "entriesPerPartition": "0"}, "'entriesPerPartition' must be a whole number >= 1"),
        ({"log": "e", "maxEntriesPerTrigger": "many"}, "'maxEntriesPerTrigger' must be a whole number"),
        ({"log": "e", "failOnDataLoss": "yes"}, "'failOnDataLoss' must be true or false"),
        ({"log": "e", "startingTimestamp": "yesterday"}, "'startingTimestamp' must be a whole number >= 0"),
        ({"log": "e", "startingTimestamp": "5", "startingPosition": "0:0"}, "'startingTimestamp', not both"),
        ({"log": "e", "endingTimestamp": "5", "endingPosition": "latest"}, "'endingTimestamp', not both"),
        ({"log": "e", "startingTimestamp": "9", "endingTimestamp": "5"}, r"'endingTimestamp' \(5\) is before"),
        ({"ledgers": "1", "endingTimestamp": "5"}, "'endingTimestamp' are for logs, not with 'ledgers'"),
        ({"log": "e", "maxBytesPerTrigger": "0"}, "'maxBytesPerTrigger' must be a whole number >= 1"),
        ({"log": "e", "minEntriesPerTrigger": "9", "maxEntriesPerTrigger": "5"}, "no micro-batch could satisfy both"),
        ({"log": "e", "maxTriggerDelay": "1m"}, "'maxTriggerDelay' bounds how long 'minEntriesPerTrigger' waits"),
        ({"log": "e", "minEntriesPerTrigger": "5", "maxTriggerDelay": "soon"}, "'maxTriggerDelay' must be a duration"),
        ({"log": "e", "minEntriesPerTrigger": "5", "maxTriggerDelay": "5 fortnights"}, "such as 30s, 15m"),
        ({"log": "e", "tlsCa": "/nowhere/ca.pem"}, "option 'tlsCa': cannot read file '/nowhere/ca.pem'"),
        ({"log": "e", "authToken": " "}, "option 'authToken' is empty"),
        ({"log": "e", "timeoutSeconds": "-1"}, "'timeoutSeconds' must be a number of seconds > 0"),
        ({"log": "e", "offloaded": "s3"}, r"option 'offloaded' is 'tier' .* or 'bookies' .* not 's3'"),
        ({"log": "e", "ledgers": "1,2"}, "give one of options 'log', 'logPattern' and 'ledgers', not 'log' and 'ledgers'"),
        ({"log": "a,b", "logPattern": "a.*"}, "not 'log' and 'logPattern'"),
        ({"log": "a,,b"}, r"option 'log': bad log name ''.*separated by commas"),
        ({"logPattern": "orders-(["}, r"option 'logPattern': 'orders-\(\[' is not a regular expression"),
        ({"log": "a,b", "startingPosition": "3:41"}, "a position SEGMENT:ENTRY names a place in one log"),
        ({"logPattern": "a.*", "endingPosition": "0:5"}, "'startingTimestamp' / 'endingTimestamp', which apply to each log"),
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


def test_every_option_is_named_as_documented() -> None:
    docs = (Path(__file__).parents[3] / "docs" / "spark.md").read_text()
    assert all(f"| `{name}` |" in docs for name in KNOWN if name not in ("path", "checkpointLocation"))
    assert set(NAMES) == {name.lower() for name in KNOWN}


def test_times_and_trigger_limits() -> None:
    opts = Options.parse({"metadata": M, "log": "e", "startingTimestamp": "1700000000000", "endingTimestamp": "1700000001000",
                          "maxBytesPerTrigger": "1048576", "minEntriesPerTrigger": "100", "maxTriggerDelay": "30s"})
    assert (opts.starting_ts, opts.ending_ts) == (1_700_000_000_000, 1_700_000_001_000)
    assert (opts.max_bytes_per_trigger, opts.min_entries_per_trigger, opts.max_trigger_delay_s) == (1 << 20, 100, 30.0)
    assert Options.parse({"metadata": M, "log": "e"}).max_trigger_delay_s == 15 * 60  # Kafka's default
    for raw, seconds in [("250ms", 0.25), ("2m", 120.0), ("1h", 3600.0), ("1500", 1.5)]:  # a bare number: ms, as Spark's
        delayed = Options.parse({"metadata": M, "log": "e", "minEntriesPerTrigger": "1", "maxTriggerDelay": raw})
        assert delayed.max_trigger_delay_s == seconds
    # Spark takes one limit from the source; latestOffset applies all of them.
    limit = LogStreamReader(opts).getDefaultReadLimit()
    assert limit == ReadMaxBytes(1 << 20)
    both = Options.parse({"metadata": M, "log": "e", "maxEntriesPerTrigger": "500", "maxBytesPerTrigger": "1000"})
    reader = LogStreamReader(both)
    assert reader.getDefaultReadLimit() == ReadMaxRows(500)
    assert (reader._limits(ReadMaxRows(500)).max_entries, reader._limits(ReadMaxRows(500)).max_bytes) == (500, 1000)
    assert reader._limits(ReadAllAvailable()).max_bytes is None  # Trigger.Once reads everything
    minimum = LogStreamReader(Options.parse({"metadata": M, "log": "e", "minEntriesPerTrigger": "7"}))
    assert minimum.getDefaultReadLimit() == ReadMinRows(7) and minimum._limits(ReadMinRows(7)).min_entries == 7
    minimum._target = Position(3, 0)  # Trigger.AvailableNow: a minimum would wait for entries that never come
    assert minimum._limits(ReadMinRows(7)).min_entries is None


def test_a_micro_batch_bound_lands_inside_a_segment_or_at_the_end() -> None:
    ranges = [SegmentRange(3, 30, 5, 9), SegmentRange(4, 40, 0, 99)]
    end = Position(4, 100)
    assert after(ranges, 3, end) == Position(3, 8)
    assert after(ranges, 5, end) == Position(3, 10)  # the boundary after segment 3
    assert after(ranges, 6, end) == Position(4, 1)
    assert after(ranges, 1000, end) == end


def test_tls_files_and_the_token(tmp_path: Path) -> None:
    ca, cert, key, token = (tmp_path / n for n in ("ca.pem", "me.pem", "me.key", "token"))
    for f in (ca, cert, key):
        f.write_text("PEM")
    token.write_text("s3cret-token\n# a comment line\n")
    opts = Options.parse({"metadata": M, "log": "e", "tlsCa": str(ca), "tlsCert": str(cert), "tlsKey": str(key),
                          "authTokenFile": str(token)})
    assert opts.security() == {"tls_ca": str(ca), "tls_cert": str(cert), "tls_key": str(key), "auth_token": "s3cret-token"}
    inline = Options.parse({"metadata": M, "log": "e", "authToken": "inline-s3cret"})
    assert inline.security()["auth_token"] == "inline-s3cret"
    assert "s3cret" not in repr(inline) and "s3cret" not in repr(opts)  # the token never shows
    for bad, message in [
        ({"tlsCert": str(cert)}, "'tlsCert' and 'tlsKey' go together"),
        ({"tlsCert": str(cert), "tlsKey": str(key)}, "'tlsCert' needs option 'tlsCa'"),
        ({"authToken": "x", "authTokenFile": str(token)}, "'authToken' or option 'authTokenFile', not both"),
    ]:
        with pytest.raises(OptionError, match=message):
            Options.parse({"metadata": M, "log": "e", **bad})
    token.write_text("\n")
    with pytest.raises(OptionError, match=r"'authTokenFile': .* is empty; its first line must be the token"):
        Options.parse({"metadata": M, "log": "e", "authTokenFile": str(token)})


def test_a_stream_refuses_an_end() -> None:
    source = BkframeDataSource({"metadata": M, "log": "e", "endingTimestamp": "5"})
    with pytest.raises(OptionError, match=r"for batch reads; .*trigger\(availableNow=True\)"):
        source.streamReader(SCHEMA)


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


def test_several_logs_a_list_or_a_pattern() -> None:
    listed = Options.parse({"metadata": M, "log": " b, a ,b", "startingPosition": "earliest"})
    assert (listed.logs, listed.log, listed.several_logs) == (("b", "a"), None, True)  # each once, in order
    assert listed.matches(["a", "c", "b"]) == ["a", "b"]
    one = Options.parse({"metadata": M, "log": "a"})
    assert (one.logs, one.log, one.several_logs) == (("a",), "a", False)
    pattern = Options.parse({"metadata": M, "logPattern": "orders-.*", "startingTimestamp": "5"})
    # The whole name must match (as Kafka's subscribePattern): 'orders-eu' yes, 'old-orders-eu' no.
    assert pattern.matches(["orders-eu", "old-orders-eu", "orders-", "orders"]) == ["orders-", "orders-eu"]
    # A write takes one log (or routes rows by a 'log' column): what to do is in the message.
    with pytest.raises(OptionError, match="drop option 'log' and give each row its log in a 'log' column"):
        listed.need_log("writing")
    with pytest.raises(OptionError, match="not 'logPattern'"):
        pattern.need_log("writing")
    source = BkframeDataSource({"metadata": M})
    with pytest.raises(OptionError, match=r"reads option 'log' .*option 'logPattern'"):
        source.reader(SCHEMA)
    with pytest.raises(OptionError, match="option 'logPattern' is for reads"):
        BkframeDataSource({"metadata": M, "logPattern": "a.*"}).writer(StructType([StructField("payload", BinaryType())]), False)


def test_stream_offsets_hold_a_position_per_log() -> None:
    pattern = Options.parse({"metadata": M, "logPattern": "s-.*"})
    value = offset({"s-b": Position(0, 0), "s-a": Position(3, 41)})
    # Names in order: Spark compares offsets as the JSON text json.dumps makes of them.
    assert json.dumps(value) == '{"logs": {"s-a": "3:41", "s-b": "0:0"}}'
    assert positions_of(json.loads(json.dumps(value)), pattern) == {"s-a": Position(3, 41), "s-b": Position(0, 0)}
    assert positions_of({"logs": {}}, pattern) == {}  # a pattern that matched nothing yet
    # A checkpoint of a query of one log, from before offsets held several: that log's position.
    one = Options.parse({"metadata": M, "log": "events"})
    assert positions_of({"position": "7:3"}, one) == {"events": Position(7, 3)}
    with pytest.raises(OffsetError, match=r"from a query of one log; this query reads the logs matching 's-\.\*'"):
        positions_of({"position": "7:3"}, pattern)
    for bad in [{"logs": {"a": "three"}}, {"offset": 5}, {"logs": ["a"]}]:
        with pytest.raises(OffsetError, match="is not a bkframe offset"):
            positions_of(bad, pattern)


def test_a_micro_batch_budget_is_shared_fairly_between_logs() -> None:
    # Max-min fair: a log with less than an equal share gets all it has, the others share the rest.
    assert fair_shares({"a": 1000, "b": 10, "c": 500}, 100) == {"a": 45, "b": 10, "c": 45}
    assert fair_shares({"a": 1000, "b": 0}, 100) == {"a": 100, "b": 0}
    assert fair_shares({"a": 3, "b": 4}, 100) == {"a": 3, "b": 4}
    assert sum(fair_shares({"a": 50, "b": 50, "c": 50}, 100).values()) == 100
    # A budget smaller than the number of logs: the units go round, turn by turn, to every log.
    got = [name for turn in range(3) for name, n in fair_shares({"a": 9, "b": 9, "c": 9}, 1, turn).items() if n]
    assert got == ["a", "b", "c"]
    # Bytes: how many records of each range's size fit a log's share.
    ranges = [SegmentRange(3, 30, 0, 9), SegmentRange(4, 40, 0, 99)]
    assert fitting(ranges, [100, 10], 950) == 9
    assert fitting(ranges, [100, 10], 1_000 + 55) == 15
    assert fitting(ranges, [100, 10], 10**9) == 110


def test_a_log_deleted_mid_stream_is_lost_data() -> None:
    strict = LogStreamReader(Options.parse({"metadata": M, "logPattern": "s-.*"}))
    with pytest.raises(NoSuchLogError, match=r"log 's-a' was deleted while the stream read it \(at 3:41\).*failOnDataLoss=false"):
        strict._lost("s-a", Position(3, 41))
    lenient = LogStreamReader(Options.parse({"metadata": M, "logPattern": "s-.*", "failOnDataLoss": "false"}))
    lenient._lost("s-a", Position(3, 41))  # warned: the stream goes on without it
    with pytest.raises(OptionError, match=r"a streaming read needs option 'log' .*or option 'logPattern'"):
        LogStreamReader(Options.parse({"metadata": M, "ledgers": "1"}))
