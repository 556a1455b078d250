"""Positions in a named log: (segment number, entry id), printed ``SEGMENT:ENTRY``, and the
other ways to say where to read from (``earliest``, ``latest``, a time).

A :class:`Position` is (segment number, entry id): segment numbers are handed out in
order and never reused, entry ids are the segment ledger's, so a position names the same
entry forever. Positions are also *boundaries*: ``(s, e)`` with ``e`` past the end of
segment ``s`` means "after segment ``s``", i.e. the start of the next segment.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

#: ``start`` / ``end`` words accepted wherever a position is.
EARLIEST = "earliest"
LATEST = "latest"


class Position(NamedTuple):
    """(segment number, entry id), ordered; printed and parsed as ``SEGMENT:ENTRY``.

    A named tuple rather than an attrs class: one is made per append and per entry read,
    and tuple creation and comparison are what this hot path can afford.
    """

    segment: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.segment}:{self.entry_id}"

    def __repr__(self) -> str:
        return f"Position({self.segment}, {self.entry_id})"

    def next(self) -> Position:
        """The position right after this one (a boundary if this was a segment's last entry)."""
        return Position(self.segment, self.entry_id + 1)

    @classmethod
    def parse(cls, text: str) -> Position:
        seg, sep, entry = text.strip().partition(":")
        try:
            if not sep:
                raise ValueError
            position = cls(int(seg), int(entry))
        except ValueError:
            position = None
        if position is None or position.segment < 0 or position.entry_id < 0:
            raise ValueError(f"bad position {text!r}: write SEGMENT:ENTRY with two numbers >= 0, e.g. 3:41")
        return position


#: Where to start or stop reading: a position, ``earliest`` / ``latest``, or a time (the
#: first position at or after it: :meth:`~bkframe.client.logs.reader.LogReader.position_at`).
Where = Position | str | datetime


def epoch_ms(when: datetime) -> int:
    """Milliseconds since the Unix epoch (a naive datetime is local time, as Python's
    ``datetime.timestamp`` takes it)."""
    return int(when.timestamp() * 1000)


def parse_where(text: str) -> Position | str:
    """A position, or ``earliest`` / ``latest``."""
    word = text.strip().lower()
    if word in (EARLIEST, LATEST):
        return word
    try:
        return Position.parse(text)
    except ValueError:
        raise ValueError(f"bad position {text!r}: write SEGMENT:ENTRY (e.g. 3:41), 'earliest' or 'latest'") from None
