"""The offload settings on the command line: ``log create``'s and ``log configure``'s options,
and ``log info``'s lines of offload settings and of what is offloaded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from bkframe.cli.options import duration as _duration
from bkframe.cli.options import seconds as _seconds
from bkframe.client.logs.model import LogSettings

if TYPE_CHECKING:
    from bkframe.client.logs.api import LogInfo

#: Written for an option to unset it.
NONE = "none"


#: Each offload option: its flag, metavar, help, and the default ``log create`` shows.
_OPTIONS = (
    ("--offload-after", "DURATION", "Closed segments this old (e.g. 6h, 2d) may be offloaded to a tier", "not by age"),
    ("--offload-beyond", "BYTES", "Offload the oldest closed segments while the log holds more than this on the bookies",
     "not by size"),
    ("--offload-deletion-lag", "DURATION", "How long an offloaded segment's ledger stays on the bookies",
     "the offload service's [offload] deletion_lag_s, 4h"),
    ("--offload-tier", "URI", "The tier the offload service moves the log's segments to: file:///PATH or s3://BUCKET?...",
     "the service's [offload] tier"),
)  # fmt: skip


def offload_options(*, defaults: bool) -> list[Any]:
    """The offload settings' options (``log create`` shows their defaults; ``log configure``
    changes only those given, and ``none`` unsets one)."""
    return [
        click.option(
            flag,
            default=None,
            metavar=metavar if defaults else f"{metavar}|{NONE}",
            help=f"{text} (default: {default})." if defaults else f"{text}.",
        )
        for flag, metavar, text, default in _OPTIONS
    ]


def with_offload_options(*, defaults: bool) -> Any:
    def wrap(fn: Any) -> Any:
        for option in reversed(offload_options(defaults=defaults)):
            fn = option(fn)
        return fn

    return wrap


def offload_settings(after: str | None, beyond: str | None, lag: str | None, tier: str | None = None) -> dict[str, Any]:
    """The :class:`LogSettings` fields the options give (an option not given: absent)."""
    out: dict[str, Any] = {}
    if after is not None:
        out["offload_after_s"] = None if after == NONE else _duration(after, "--offload-after")
    if beyond is not None:
        if beyond == NONE:
            out["offload_beyond_bytes"] = None
        elif not beyond.isdigit() or int(beyond) <= 0:
            raise click.BadParameter(f"{beyond!r}: write a number of bytes > 0 (or none)", param_hint="--offload-beyond")
        else:
            out["offload_beyond_bytes"] = int(beyond)
    if lag is not None:
        out["offload_deletion_lag_s"] = (
            None if lag == NONE else 0.0 if lag in ("0", "0s") else _duration(lag, "--offload-deletion-lag")
        )
    if tier is not None:
        if tier != NONE and "://" not in tier:
            raise click.BadParameter(f"{tier!r}: write a tier URI, file:///PATH or s3://BUCKET?... (or none)",
                                     param_hint="--offload-tier")
        out["offload_tier"] = None if tier == NONE else tier
    return out


def settings_line(s: LogSettings) -> str:
    """``log info``'s line of offload settings."""
    after = _seconds(s.offload_after_s) if s.offload_after_s is not None else "-"
    beyond = f"{s.offload_beyond_bytes} bytes" if s.offload_beyond_bytes is not None else "-"
    lag = _seconds(s.offload_deletion_lag_s) if s.offload_deletion_lag_s is not None else "[offload] deletion_lag_s"
    tier = f" to {s.offload_tier}" if s.offload_tier is not None else ""
    return f"offload{tier}: after {after}, beyond {beyond}; ledgers kept {lag} after"


def offloaded_line(info: LogInfo) -> str:
    """``log info``'s line of what is offloaded."""
    o = info.offloaded
    if not o.segments:
        return "offloaded: none"
    return (
        f"offloaded: {o.segments} segment(s), {o.entries} entries, {o.length} bytes (objects {o.object_bytes} bytes) "
        f"to {', '.join(o.tiers)}; ledgers still on the bookies: {o.on_bookies}"
    )
