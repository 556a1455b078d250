"""Durations on the command line (``90``, ``90s``, ``15m``, ``12h``, ``7d``) and for people."""

from __future__ import annotations

import re

import click

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str, option: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``12h`` or ``7d``."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not m or float(m.group(1)) <= 0:
        raise click.BadParameter(f"{text!r}: write a duration > 0 such as 90s, 15m, 12h or 7d", param_hint=option)
    return float(m.group(1)) * UNITS.get(m.group(2) or "s", 1)


def seconds(s: float | None) -> str:
    """A duration for people: 45s, 12m, 3.5h, 7d; - for none."""
    if s is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.3g}{unit}"
    return f"{s:.0f}s"
