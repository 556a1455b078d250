"""What a subscription is: its settings, positions packed for the state's bitmaps, and its
record in the metadata store (a cursor record of the log: docs/subscriptions.md, "Where it
is kept")."""

from __future__ import annotations

import enum
import json
import time
from typing import Any

import attrs
from attrs import validators as v

from bkframe.client.logs.positions import Position
from bkframe.errors import MetadataError

#: Entry ids are packed in the low 32 bits of a position's key (``segment << 32 | entry``).
ENTRY_BITS = 32
ENTRY_MASK = (1 << ENTRY_BITS) - 1
#: A snapshot at most this large (serialized) is kept inline in the record; a larger one is
#: written to the state ledger and the record names where.
INLINE_SNAPSHOT_BYTES = 64 * 1024


def pack(position: Position) -> int:
    """A position as one integer, ordered as positions are (the key of the state's bitmaps)."""
    segment, entry = position
    if not 0 <= entry <= ENTRY_MASK:
        raise ValueError(f"position {position}: a subscription's entry ids must be below 2**32")
    return segment << ENTRY_BITS | entry


def unpack(key: int) -> Position:
    return Position(key >> ENTRY_BITS, key & ENTRY_MASK)


class Kind(enum.StrEnum):
    #: Any consumer takes any record.
    SHARED = "shared"
    #: One key's records go to one consumer at a time, in log order.
    KEY_SHARED = "key_shared"


#: The ledger types a subscription's state ledgers may have: with PD_JOURNAL a confirmed ack is
#: fsynced on the ack quorum (it survives a power cut); with BYPASS_JOURNAL it is in their page
#: cache (any process crash, not a power cut of those bookies together). docs/subscriptions.md,
#: "How durable an ack is".
STATE_LEDGER_TYPES = ("PD_JOURNAL", "BYPASS_JOURNAL")


def _state_ledger_type(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in STATE_LEDGER_TYPES:
        # VD_JOURNAL is left out on purpose: it confirms an add before the bookie wrote it, so
        # killing the processes of an ack quorum could bring an acked record back.
        raise ValueError(
            f"state_ledger_type {value!r} is not one a subscription can use: PD_JOURNAL (the default: acks "
            "survive power cuts) or BYPASS_JOURNAL (acks survive process crashes, not a power cut of the bookies)"
        )


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class SubscriptionSettings:
    """How a subscription hands out records (fixed at creation)."""

    kind: Kind = attrs.field(default=Kind.SHARED, converter=Kind)
    #: How long a consumer holds a record it leased, unless it extends the lease.
    lease_s: float = attrs.field(default=30.0, validator=_positive)
    #: After this many deliveries without an ack, a record goes to ``dead_letter`` (if set;
    #: otherwise it is delivered again). None: no limit.
    max_deliveries: int | None = attrs.field(default=None, validator=v.optional(v.ge(1)))
    #: The log dead-lettered records are appended to (created when first needed).
    dead_letter: str | None = None
    #: How many read records (not leased yet: ahead of the consumers, or held behind their
    #: key) the owner keeps in memory before it stops reading ahead.
    max_held: int = attrs.field(default=10_000, validator=v.ge(1))
    #: The ledger type of its state ledgers, which decides what a confirmed ack survives
    #: (:data:`STATE_LEDGER_TYPES`).
    state_ledger_type: str = attrs.field(default="PD_JOURNAL", validator=_state_ledger_type)

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["kind"] = self.kind.value
        if self.state_ledger_type == "PD_JOURNAL":
            del d["state_ledger_type"]  # the default: records an older bkframe can still read
        return d

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SubscriptionSettings:
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"subscription settings {', '.join(unknown)} are not known to this bkframe (upgrade it)")
        return cls(**raw)


@attrs.frozen
class SnapshotRef:
    """Where the latest snapshot is: inline bytes, or entries ``first..last`` of a state ledger.
    Events to replay follow it: in ``ledger`` after ``last``, then in the later state ledgers."""

    ledger_id: int
    first: int
    last: int
    inline: bytes | None = None


@attrs.frozen
class SubscriptionRecord:
    """The subscription's record: a cursor record of its log, so retention and ``log info``
    see its mark-delete as a cursor's position."""

    log: str
    name: str
    settings: SubscriptionSettings
    #: Every position before it is acked (as of the last snapshot).
    mark_delete: Position
    log_uid: str = ""
    #: How many owners the subscription has had: the one taking it over stores epoch + 1.
    epoch: int = 0
    #: The state ledgers, oldest first: the events after the snapshot are in them.
    state_ledgers: tuple[int, ...] = ()
    snapshot: SnapshotRef | None = None
    updated_at: float = attrs.field(factory=time.time)
    version: int = -1

    def serialize(self) -> bytes:
        d: dict[str, Any] = {
            "position": str(self.mark_delete), "log_uid": self.log_uid, "updated_at": self.updated_at,
            "subscription": {
                "settings": self.settings.to_json(), "epoch": self.epoch, "state_ledgers": list(self.state_ledgers),
            },
        }
        if self.snapshot is not None:
            s = self.snapshot
            d["subscription"]["snapshot"] = [s.ledger_id, s.first, s.last, None if s.inline is None else s.inline.hex()]
        return json.dumps(d, separators=(",", ":")).encode()

    @staticmethod
    def is_subscription(data: bytes) -> bool:
        """The stored cursor record is a subscription's (and not a plain cursor's)."""
        try:
            return "subscription" in json.loads(data)
        except ValueError:
            return False

    @classmethod
    def deserialize(cls, log: str, name: str, data: bytes, version: int) -> SubscriptionRecord:
        try:
            raw = json.loads(data)
            sub = raw["subscription"]
            snap = sub.get("snapshot")
            ref = None
            if snap is not None:
                ref = SnapshotRef(int(snap[0]), int(snap[1]), int(snap[2]), None if snap[3] is None else bytes.fromhex(snap[3]))
            return cls(
                log, name, SubscriptionSettings.from_json(sub["settings"]), Position.parse(raw["position"]),
                raw["log_uid"], int(sub["epoch"]), tuple(int(i) for i in sub["state_ledgers"]), ref,
                float(raw["updated_at"]), version,
            )
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise MetadataError(f"stored subscription {name!r} of log {log!r} does not parse: {e!r}") from None
