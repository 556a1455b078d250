"""The compaction settings on the command line: ``log create``'s and ``log configure``'s
options, and ``log info``'s line of them (docs/compaction.md)."""

from __future__ import annotations

from typing import Any

import click

from bkframe.cli.options import duration as _duration
from bkframe.cli.options import seconds as _seconds
from bkframe.client.logs.model import COMPACTION_POLICIES, LogSettings

#: Each option: its flag, metavar, help, and the default ``log create`` shows.
_OPTIONS = (
    ("--compaction", "POLICY", "key: keep only each key's latest record (an empty payload deletes its key); none: keep all",
     "none"),
    ("--min-compaction-lag", "DURATION", "Records younger than this (e.g. 1h) are never compacted",
     "the cluster's, [offload] compaction_lag_s, 0"),
    ("--tombstone-retention", "DURATION", "A tombstone is kept at least this long",
     "the cluster's, [offload] tombstone_retention_s, 24h"),
    ("--min-dirty-ratio", "RATIO", "A scheduled compaction waits for this share of the log written since the last",
     "the cluster's, [offload] min_dirty_ratio, 0.5"),
)  # fmt: skip


def with_compaction_options(*, defaults: bool) -> Any:
    """The compaction settings' options (``log create`` shows their defaults; ``log
    configure`` changes only those given)."""

    def wrap(fn: Any) -> Any:
        for flag, metavar, text, default in reversed(_OPTIONS):
            fn = click.option(
                flag, default=None, metavar=metavar, help=f"{text} (default: {default})." if defaults else f"{text}.",
            )(fn)
        return fn

    return wrap


def compaction_settings(
    policy: str | None, lag: str | None, tombstones: str | None, ratio: str | None
) -> dict[str, Any]:
    """The :class:`LogSettings` fields the options give (an option not given: absent)."""
    out: dict[str, Any] = {}
    if policy is not None:
        if policy not in COMPACTION_POLICIES:
            raise click.BadParameter(f"{policy!r}: write one of {', '.join(COMPACTION_POLICIES)}", param_hint="--compaction")
        out["compaction"] = policy
    if lag is not None:
        out["min_compaction_lag_s"] = 0.0 if lag.strip() in ("0", "0s") else _duration(lag, "--min-compaction-lag")
    if tombstones is not None:
        out["tombstone_retention_s"] = (
            0.0 if tombstones.strip() in ("0", "0s") else _duration(tombstones, "--tombstone-retention")
        )
    if ratio is not None:
        try:
            value = float(ratio)
        except ValueError:
            value = -1.0
        if not 0 <= value <= 1:
            raise click.BadParameter(f"{ratio!r}: write a number from 0 to 1", param_hint="--min-dirty-ratio")
        out["min_dirty_ratio"] = value
    return out


def compaction_line(s: LogSettings) -> str:
    """``log info``'s line of compaction settings."""
    if s.compaction == "none":
        return "compaction: none"
    cluster = "the cluster's"
    lag, kept, ratio = s.min_compaction_lag_s, s.tombstone_retention_s, s.min_dirty_ratio
    return (
        f"compaction: {s.compaction}; lag {cluster if lag is None else _seconds(lag) if lag else '0'}, "
        f"tombstones kept {cluster if kept is None else _seconds(kept)}, "
        f"dirty ratio {cluster if ratio is None else f'{ratio:g}'}"
    )
