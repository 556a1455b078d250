"""Queries of several logs: which logs a query reads now, a stream's offset (one position
per log), and how a micro-batch's budget is shared between the logs.

A query reads the logs listed in option ``log`` (``a,b``) or those whose whole name matches
option ``logPattern`` (a regular expression, as Kafka's ``subscribePattern``), found with
``Logs.list_logs()`` each time a batch is planned: a stream picks up logs that appear, from
their start.

A stream's offset is a map from each log it reads to a position in it, a boundary:
``{"logs": {"a": "3:41", "b": "0:0"}}``. Before queries read several logs an offset was
one position, ``{"position": "3:41"}``; a checkpoint holding one is read as that position
in the query's one log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bkframe import Client, Position
from bkframe.errors import BKError
from bkframe_spark.options import Options


class OffsetError(BKError, ValueError):
    """A stream's checkpoint holds an offset this query cannot resume from."""


def offset(positions: Mapping[str, Position]) -> dict[str, Any]:
    """The offset Spark stores: logs in name order, so that equal offsets are equal JSON
    (Spark compares offsets as the text ``json.dumps`` makes of them)."""
    return {"logs": {name: str(positions[name]) for name in sorted(positions)}}


def positions_of(value: Mapping[str, Any], opts: Options) -> dict[str, Position]:
    """Each log's position in an offset Spark hands back (from :func:`offset`, or from a
    checkpoint of the one-position form)."""
    try:
        if "logs" in value:
            return {str(name): Position.parse(str(p)) for name, p in dict(value["logs"]).items()}
        single = Position.parse(str(value["position"])) if "position" in value else None
    except (ValueError, TypeError, AttributeError) as e:
        raise OffsetError(f"the checkpoint's offset {value!r} is not a bkframe offset ({e})") from None
    if single is None:
        raise OffsetError(f"the checkpoint's offset {value!r} is not a bkframe offset (no 'logs' nor 'position')")
    if opts.log is None:
        raise OffsetError(
            f"the checkpoint's offset {dict(value)} is a position in one log, from a query of one log; this query "
            f"reads {describe(opts)}: give it a new checkpointLocation (or read that one log)"
        )
    return {opts.log: single}


def describe(opts: Options) -> str:
    """The logs a query reads, for messages."""
    if opts.log_pattern is not None:
        return f"the logs matching {opts.log_pattern!r}"
    return f"log {opts.logs[0]!r}" if len(opts.logs) == 1 else f"logs {', '.join(opts.logs)}"


async def log_names(client: Client, opts: Options) -> list[str]:
    """The logs the query reads now, sorted: the listed ones (whether they exist or not:
    reading one that does not is an error), or the existing ones the pattern matches."""
    if opts.log_pattern is None:
        return sorted(opts.logs)
    return opts.matches(await client.logs.list_logs())


def fair_shares(available: Mapping[str, int], budget: int, turn: int = 0) -> dict[str, int]:
    """Split ``budget`` (entries, or bytes) between logs that have ``available`` each,
    max-min fairly: every log gets the same share, a log with less than that gets all it has
    and the rest goes to the others. When fewer units are left than logs want one, they go
    one each to the logs from the ``turn``-th on (in name order, wrapping): a caller that
    moves ``turn`` on each batch starves no log, however small the budget."""
    shares = dict.fromkeys(available, 0)
    left = budget
    hungry = sorted(name for name, n in available.items() if n > 0)
    while left > 0 and hungry:
        each = left // len(hungry)
        if each == 0:
            k = turn % len(hungry)
            for name in (hungry[k:] + hungry[:k])[:left]:
                shares[name] += 1
            break
        for name in hungry:
            given = min(each, available[name] - shares[name])
            shares[name] += given
            left -= given
        hungry = [name for name in hungry if shares[name] < available[name]]
    return shares
