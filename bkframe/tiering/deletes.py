"""Deleting the objects of segments that left a log: after a trim (by position, retention
or forced) and after the log's delete.

The metadata goes first: the trim's or delete's compare-and-set is the commit, and from it
on no reader is sent to those objects. Then each removed segment's object is deleted from
the tier its :class:`~bkframe.tiering.offload_record.Offload` names (opened through the
client's :class:`~bkframe.tiering.open_tiers.OpenTiers`, as reads open it). A delete
that fails or times out -- the store unreachable, no plugin or credentials for the tier on
this machine -- never fails the trim or delete, which is done: it is logged, and the object
is left to the orphan sweep (:mod:`bkframe.tiering.sweep`), which reclaims every
object no log names once its grace has passed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import anyio

from bkframe.client.logs.model import Segment
from bkframe.tiering.open_tiers import OpenTiers

log = logging.getLogger("bkframe.logs")

#: The longest one trim or delete spends deleting objects, all tiers together: a writer
#: trims after each rollover, and an unreachable store must not hold it for minutes.
DELETE_OBJECTS_TIMEOUT_S = 30.0


async def delete_objects(
    tiers: OpenTiers, name: str, segments: Iterable[Segment], *, timeout_s: float = DELETE_OBJECTS_TIMEOUT_S
) -> int:
    """Delete the objects of ``segments`` (those offloaded) from their tiers; how many were
    deleted. Never raises for a tier's failure (see the module)."""
    by_tier: dict[str, list[str]] = {}
    for seg in segments:
        if seg.offload is not None:
            by_tier.setdefault(seg.offload.tier, []).append(seg.offload.key)
    deleted = 0
    with anyio.move_on_after(timeout_s) as scope:
        for uri, keys in by_tier.items():
            done = 0
            try:
                tier = await tiers.get(uri)
                for key in keys:
                    await tier.delete(key)
                    done += 1
            except Exception as e:  # noqa: BLE001 - the metadata is committed: the sweep reclaims what is left
                log.warning(
                    "log %r: deleting the objects of removed segments from tier %s failed; %d object(s) left to the "
                    "orphan sweep: %s",
                    name,
                    uri,
                    len(keys) - done,
                    e,
                )
            finally:
                deleted += done
    if scope.cancelled_caught:
        log.warning(
            "log %r: deleting the objects of removed segments took over %g s; %d object(s) left to the orphan sweep",
            name,
            timeout_s,
            sum(len(k) for k in by_tier.values()) - deleted,
        )
    return deleted
