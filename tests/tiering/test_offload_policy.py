"""What the offload service finds due in a log: by age, by size (oldest first), the log's
settings over the service's defaults, and the ledgers past the deletion lag."""

from __future__ import annotations

from bkframe.client.logs.envelope import FORMAT_ENVELOPE
from bkframe.client.logs.model import LogSettings, Segment
from bkframe.tiering.offload_policy import OffloadPolicy
from bkframe.tiering.offload_record import Offload

NOW = 1_800_000_000.0


def seg(
    number: int, *, age_s: float, length: int = 100, offloaded_s_ago: float | None = None, on_bookies: bool = True
) -> Segment:
    o = None
    if offloaded_s_ago is not None:
        o = Offload("file:///t", f"k{number}", 10, 1, 0, 0, NOW - offloaded_s_ago, on_bookies)
    latest = int((NOW - age_s) * 1000)
    return Segment(number, 100 + number, True, 9, length, format=FORMAT_ENVELOPE, min_ts=latest, max_ts=latest, offload=o)


def test_due_by_age_and_by_size_oldest_first_with_the_logs_settings_over_the_defaults() -> None:
    segments = [seg(0, age_s=7200), seg(1, age_s=3000, offloaded_s_ago=10), seg(2, age_s=1800), seg(3, age_s=60),
                Segment(4, 104)]  # the open segment: never
    # No tier anywhere: nothing, whatever the ages.
    assert OffloadPolicy.of(LogSettings(offload_after_s=1.0)).due(segments, NOW) == {}
    # The service's tier and age; segment 1 is offloaded already.
    by_age = OffloadPolicy.of(LogSettings(), tier="file:///t", after_s=1000.0)
    assert by_age.due(segments, NOW) == {0: NOW - 7200 + 1000, 2: NOW - 1800 + 1000}
    # The log's own: by size, the oldest not offloaded while more than 150 bytes are left.
    by_size = OffloadPolicy.of(LogSettings(offload_tier="s3://b", offload_beyond_bytes=150), tier="file:///t", after_s=1e9)
    assert by_size.tier == "s3://b" and by_size.due(segments, NOW) == {0: None, 2: None}
    assert OffloadPolicy.of(LogSettings(offload_tier="s3://b", offload_beyond_bytes=300)).due(segments, NOW) == {}


def test_deletable_after_the_lag_the_logs_own_or_the_services() -> None:
    segments = [seg(0, age_s=9e4, offloaded_s_ago=5000), seg(1, age_s=9e4, offloaded_s_ago=100),
                seg(2, age_s=9e4, offloaded_s_ago=9e4, on_bookies=False)]
    assert [s.number for s in OffloadPolicy.of(LogSettings(), deletion_lag_s=4000).deletable(segments, NOW)] == [0]
    own = LogSettings(offload_deletion_lag_s=0.0)
    assert [s.number for s in OffloadPolicy.of(own, deletion_lag_s=4000).deletable(segments, NOW)] == [0, 1]
