"""Named logs: the model. A log is an unbounded stream made of ledgers (segments).

One metadata record per log holds its settings, its ordered segments, who writes it, and
the tokens of its recent commits; every change is a compare-and-set on the record's
version (the metadata store keeps the record as opaque bytes, see
:class:`~bkframe.core.interfaces.metadata_store.MetadataStore`). Cursors are records of their own, so a
consumer moving its cursor never contends with the writer.

Positions are in :mod:`bkframe.client.logs.positions` (and importable from here).

Reading and writing are in :mod:`bkframe.client.logs.writer` and
:mod:`bkframe.client.logs.reader`; the client's entry point is
:class:`bkframe.client.logs.api.Logs`. The errors are in :mod:`bkframe.errors`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from attrs import validators as v

from bkframe.client.logs.envelope import FORMAT_ENVELOPE, FORMAT_RAW, NO_PROPERTIES
from bkframe.client.logs.positions import EARLIEST, LATEST, Position, Where, epoch_ms, parse_where
from bkframe.core.metadata import DigestType
from bkframe.errors import MetadataError
from bkframe.tiering.offload_record import Offload

__all__ = ["EARLIEST", "LATEST", "Position", "Where", "epoch_ms", "parse_where"]

#: Log and cursor names: they become ZooKeeper node names and etcd key parts.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
#: How many recent commit tokens a log remembers (a commit retried after more commits
#: than this would be applied again).
TOKEN_HISTORY = 256


def check_name(name: str, what: str = "log") -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"bad {what} name {name!r}: use 1 to 200 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


# -- settings --------------------------------------------------------------------------


def _quorums(instance: LogSettings, attribute: attrs.Attribute[Any], value: Any) -> None:
    e, w, a = instance.ensemble, instance.write_quorum, instance.ack_quorum
    if not (e >= w >= a >= 1):
        raise ValueError(f"quorum sizes must satisfy E >= W >= A >= 1, got E={e} W={w} A={a}")


def _positive_or_none(instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be > 0 (or unset), got {value!r}")


#: The values of :attr:`LogSettings.compaction`.
COMPACTION_POLICIES = ("none", "key")


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


@attrs.frozen
class CompactionDefaults:
    """What a log's compaction settings left unset (None) are: the cluster's defaults
    (``[offload]`` of the compacting process's config), these built-in ones otherwise."""

    min_compaction_lag_s: float = attrs.field(default=0.0, validator=v.ge(0))
    tombstone_retention_s: float = attrs.field(default=24 * 3600.0, validator=v.ge(0))
    min_dirty_ratio: float = attrs.field(default=0.5, validator=[v.ge(0), v.le(1)])

    def lag_s(self, settings: LogSettings) -> float:
        return self.min_compaction_lag_s if settings.min_compaction_lag_s is None else settings.min_compaction_lag_s

    def tombstones_s(self, settings: LogSettings) -> float:
        return self.tombstone_retention_s if settings.tombstone_retention_s is None else settings.tombstone_retention_s

    def dirty_ratio(self, settings: LogSettings) -> float:
        return self.min_dirty_ratio if settings.min_dirty_ratio is None else settings.min_dirty_ratio


@attrs.frozen
class LogSettings:
    """How a log's segments are made, when they roll over, and what retention keeps.

    Rollover defaults follow Pulsar's managed ledger (``managedLedgerMaxEntriesPerLedger``
    50,000, ``managedLedgerMaxSizePerLedgerMbytes`` 2048, rollover time 4 h). A segment
    rolls over at the first append that finds any limit reached; retention is off (None)
    unless set.
    """

    ensemble: int = attrs.field(default=3, validator=_quorums)
    write_quorum: int = 2
    ack_quorum: int = 2
    ledger_type: str = "PD_JOURNAL"
    digest: DigestType = attrs.field(default=DigestType.CRC32C, converter=DigestType)
    rollover_entries: int = attrs.field(default=50_000, validator=v.ge(1))
    rollover_bytes: int = attrs.field(default=2 << 30, validator=v.ge(1))
    rollover_s: float = attrs.field(default=4 * 3600.0, validator=_positive_or_none)
    #: Closed segments older than this (by the time they closed) may be trimmed.
    retention_s: float | None = attrs.field(default=None, validator=_positive_or_none)
    #: Oldest closed segments may be trimmed while the log holds more than this.
    retention_bytes: int | None = attrs.field(default=None, validator=_positive_or_none)
    #: The log record keeps fewer than twice this many closed segments before its first
    #: open one; older ones move, this many at a time, to chunk records of their own
    #: (written once, read only by a reader that seeks back), so the record stays bounded.
    segments_per_chunk: int = attrs.field(default=500, validator=v.ge(2))
    #: A cursor not moved for this long (and without a ``ttl_s`` of its own) stops holding
    #: retention back: a trim passes it and moves it to the new start. None: cursors pin
    #: what they have not acknowledged forever.
    cursor_ttl_s: float | None = attrs.field(default=None, validator=_positive_or_none)
    #: Tiered storage (docs/tiered-storage.md#offloading-a-log): a closed segment may be
    #: offloaded once it is this old (s, as retention counts age) and/or while the log holds
    #: more than this many bytes on the bookies (the oldest first); None: not for that reason.
    offload_after_s: float | None = attrs.field(default=None, validator=_positive_or_none)
    offload_beyond_bytes: int | None = attrs.field(default=None, validator=_positive_or_none)
    #: How long an offloaded segment's ledger stays on the bookies after its offload, so
    #: readers that opened it finish; None: the offload service's ``[offload] deletion_lag_s``
    #: (4 h, Pulsar's ``managedLedgerOffloadDeletionLagMs``).
    offload_deletion_lag_s: float | None = attrs.field(default=None, validator=v.optional(v.ge(0)))
    #: The tier (URI) the offload service moves its segments to; None: ``[offload] tier``.
    offload_tier: str | None = attrs.field(default=None, validator=v.optional(v.min_len(1)))
    #: Compaction (docs/compaction.md): ``key`` keeps only the latest record of each key
    #: (a record with a key and an empty payload is a tombstone that deletes its key);
    #: ``none``: every record is kept.
    compaction: str = attrs.field(default="none", validator=v.in_(COMPACTION_POLICIES))
    #: Nothing younger than this (s, by the segment's latest timestamp) is compacted.
    #: None here and in the two below: the cluster's default (``[offload]``
    #: ``compaction_lag_s``, ``tombstone_retention_s``, ``min_dirty_ratio``; built in: 0 s,
    #: 24 h, 0.5; see :class:`CompactionDefaults`).
    min_compaction_lag_s: float | None = attrs.field(default=None, converter=_float_or_none, validator=v.optional(v.ge(0)))
    #: A tombstone lives at least this long (s) before a compaction may drop it.
    tombstone_retention_s: float | None = attrs.field(
        default=None, converter=_float_or_none, validator=v.optional(v.ge(0))
    )
    #: A scheduled compaction runs once this share of the log's bytes was written since the
    #: last one.
    min_dirty_ratio: float | None = attrs.field(
        default=None, converter=_float_or_none, validator=v.optional([v.ge(0), v.le(1)])
    )

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["digest"] = self.digest.value
        # Settings newer than a release are stored only when set: a log that does not use
        # them stays readable by that release (which refuses keys it does not know).
        for name in _NEWER_SETTINGS:
            if d[name] == _DEFAULTS[name]:
                del d[name]
        return d

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LogSettings:
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:  # a newer bkframe's setting: refusing beats dropping it at the next rewrite
            raise ValueError(f"settings {', '.join(unknown)} are not known to this bkframe (upgrade it)")
        return cls(**raw)


_NEWER_SETTINGS = (
    "offload_after_s", "offload_beyond_bytes", "offload_deletion_lag_s", "offload_tier",
    "compaction", "min_compaction_lag_s", "tombstone_retention_s", "min_dirty_ratio",
)
_DEFAULTS = {f.name: f.default for f in attrs.fields(LogSettings)}


# -- segments and the log record --------------------------------------------------------


@attrs.frozen
class Compacted:
    """What compaction made of a segment (docs/compaction.md, "Compacted segments"): its
    ledger holds only the records kept, in position order, then ``index_entries`` entries
    that list the kept records' entry ids (:mod:`bkframe.client.logs.compacted`)."""

    #: Records kept: the ledger's entries ``0..kept-1``; its index follows them.
    kept: int
    index_entries: int
    #: How many compactions rewrote the segment so far.
    generation: int = 1
    compacted_at: float = 0.0
    #: The ledger this one replaced, kept for readers that opened it until a later
    #: compaction retires it (after its lag); -1 once retired.
    replaced: int = -1

    def to_json(self) -> list[Any]:
        return [self.kept, self.index_entries, self.generation, self.compacted_at, self.replaced]

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> Compacted:
        kept, index_entries, generation, at = raw[:4]
        replaced = raw[4] if len(raw) > 4 else -1
        return cls(int(kept), int(index_entries), int(generation), float(at), int(replaced))


@attrs.frozen
class Segment:
    """One ledger of a log. ``last_entry_id`` and ``length`` are known once it is closed."""

    number: int
    ledger_id: int
    closed: bool = False
    last_entry_id: int = -1
    length: int = 0
    created_at: float = 0.0
    closed_at: float = 0.0
    #: Set when the writer moved on to the next segment: the last entry id it had sent
    #: here (-1 before). Recovery that finds less knows entries were lost in flight, and
    #: drops the later open segments, so the log stays a prefix of what was appended.
    last_sent: int = -1
    #: How its entries are stored: :data:`~bkframe.client.logs.envelope.FORMAT_ENVELOPE`
    #: (key, timestamp, properties around the payload), or ``FORMAT_RAW`` (payloads only:
    #: segments written before envelopes existed, or ledgers committed without one).
    format: int = FORMAT_RAW
    #: The smallest and largest timestamp (ms) of its entries, once it is closed by the
    #: writer that wrote it (or committed with them); -1 when not known (open, recovered by
    #: the next writer, raw): then a seek by time looks inside.
    min_ts: int = -1
    max_ts: int = -1
    #: Where its object is, once offloaded to a tier (see :mod:`bkframe.tiering.offload_record`).
    offload: Offload | None = None
    #: Set once compaction rewrote it: ``ledger_id`` is then the compacted ledger, whose
    #: entries keep their positions through its index; ``length`` is the kept bytes.
    compacted: Compacted | None = None

    @property
    def entries(self) -> int:
        return self.last_entry_id + 1

    def ledgers(self) -> tuple[int, ...]:
        """Every ledger the segment holds on to: its own, and the one it replaced by
        compaction until that is retired."""
        if self.compacted is not None and self.compacted.replaced >= 0:
            return (self.ledger_id, self.compacted.replaced)
        return (self.ledger_id,)

    @property
    def enveloped(self) -> bool:
        """Its entries are records in envelopes (:func:`bkframe.decode_record` reads one)."""
        return self.format == FORMAT_ENVELOPE

    def first(self) -> Position:
        return Position(self.number, 0)

    def last(self) -> Position | None:
        """The last entry's position (None while open or if empty)."""
        return Position(self.number, self.last_entry_id) if self.closed and self.last_entry_id >= 0 else None

    def passed_by(self, position: Position) -> bool:
        """Every entry of this closed segment is before ``position``."""
        return self.closed and (
            position.segment > self.number or (position.segment == self.number and position.entry_id > self.last_entry_id)
        )

    def latest_ms(self) -> int | None:
        """The latest time (ms) of this closed segment's entries as far as is known without
        reading it: its largest timestamp, or for a raw segment (no timestamps) its close
        time; None if open or not recorded (a segment recovered by the next writer)."""
        if not self.closed:
            return None
        if self.max_ts >= 0:
            return self.max_ts
        if self.format == FORMAT_RAW:
            return int(self.closed_at * 1000)
        return None

    def aged_at(self) -> float:
        """When this closed segment's age counts from, for retention (s since the epoch): its
        latest timestamp, as Kafka's ``retention.ms`` (a segment of old event times goes
        soon), else when it closed."""
        latest = self.latest_ms()
        return latest / 1000 if latest is not None else self.closed_at

    def to_json(self) -> list[Any]:
        out: list[Any] = [
            self.number, self.ledger_id, int(self.closed), self.last_entry_id, self.length, self.created_at,
            self.closed_at, self.last_sent, self.format, self.min_ts, self.max_ts,
        ]
        if self.offload is not None or self.compacted is not None:  # appended: older readers take the first 11
            out.append(self.offload.to_json() if self.offload is not None else None)
        if self.compacted is not None:
            out.append(self.compacted.to_json())
        return out

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> Segment:
        number, ledger_id, closed, last, length, created, closed_at, last_sent = raw[:8]
        # Segments stored before envelopes have 8 fields: raw payloads, times unknown.
        fmt, min_ts, max_ts = raw[8:11] if len(raw) >= 11 else (FORMAT_RAW, -1, -1)
        offload = Offload.from_json(raw[11]) if len(raw) > 11 and raw[11] else None
        compacted = Compacted.from_json(raw[12]) if len(raw) > 12 and raw[12] else None
        return cls(
            int(number), int(ledger_id), bool(closed), int(last), int(length), float(created), float(closed_at),
            int(last_sent), int(fmt), int(min_ts), int(max_ts), offload, compacted,
        )


@attrs.frozen
class Chunk:
    """Closed segments moved out of the log record to a record of their own (see
    :mod:`bkframe.client.logs.chunks`): where to find them, and what a trim or ``info``
    needs to know of them without reading them."""

    #: The number of the first segment it was written with: its record's name.
    key: int
    #: Its first segment not trimmed, and its last.
    first: int
    last: int
    count: int
    entries: int
    length: int
    #: The latest close among them (retention by age takes a whole chunk by it).
    closed_at: float
    #: The last segment's last entry id.
    last_entry_id: int
    #: The latest :meth:`Segment.latest_ms` of its segments; -1 if one of them has none
    #: (a seek by time then reads the chunk).
    max_ts: int = -1

    def as_segment(self) -> Segment:
        """A stand-in for trimming decisions: a cursor, a position or retention lets it go
        exactly when it lets every one of its segments go."""
        return Segment(
            self.last, -1, True, self.last_entry_id, self.length, 0.0, self.closed_at,
            format=FORMAT_ENVELOPE if self.max_ts >= 0 else FORMAT_RAW, max_ts=self.max_ts,
        )

    def to_json(self) -> list[Any]:
        return [
            self.key, self.first, self.last, self.count, self.entries, self.length, self.closed_at, self.last_entry_id,
            self.max_ts,
        ]

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> Chunk:
        key, first, last, count, entries, length, closed_at, last_entry_id = raw[:8]
        max_ts = raw[8] if len(raw) > 8 else -1
        return cls(int(key), int(first), int(last), int(count), int(entries), int(length), float(closed_at),
                   int(last_entry_id), int(max_ts))


@attrs.frozen
class Commit:
    """A remembered ``commit_ledgers``: its token and the segments it added."""

    token: str
    first_segment: int
    last_segment: int
    committed_at: float

    @property
    def segments(self) -> tuple[int, ...]:
        return tuple(range(self.first_segment, self.last_segment + 1))


@attrs.frozen
class Staged:
    """A ledger being written to be committed under ``token`` by the writer ``group`` (one
    run of a Spark job, say): listed in the log record from its creation, so that the
    commit of ``token`` that leaves it out, or discarding ``group``, deletes it."""

    ledger_id: int
    token: str
    group: str


#: The commit token that marks a staging group discarded (see :meth:`LogMetadata.discarded`).
DISCARD_PREFIX = "discarded:"


@attrs.frozen
class LogMetadata:
    name: str
    settings: LogSettings
    password_hash: str = ""
    #: Made at creation: cursors and caches of a deleted and re-created log never mix.
    uid: str = ""
    created_at: float = attrs.field(factory=time.time)
    #: The recent segments; older closed ones are in ``chunks`` (read them with
    #: :meth:`bkframe.client.logs.records.LogRecords.segments`).
    segments: tuple[Segment, ...] = ()
    chunks: tuple[Chunk, ...] = ()
    #: The number the next segment gets (never reused, even after trims or dropped segments).
    next_segment: int = 0
    #: Segments numbered below this were trimmed: their positions are gone.
    first_segment: int = 0
    #: The current writer's id ("" when none) and the number of writers so far.
    writer: str = ""
    writer_epoch: int = 0
    #: Ledgers the writer made ready for its next rollover (not segments yet).
    spares: tuple[int, ...] = ()
    #: Ledgers no longer part of the log, to be deleted (kept here until they are).
    garbage: tuple[int, ...] = ()
    commits: tuple[Commit, ...] = ()
    #: Ledgers written to be committed later (see :class:`Staged`).
    staged: tuple[Staged, ...] = ()
    #: What trims removed so far (segments, entries, bytes).
    trimmed_entries: int = 0
    trimmed_bytes: int = 0
    #: Owner epochs that commits naming them must match (a subscription's exactly-once acks,
    #: docs/subscriptions.md): a new owner raises its epoch here, and a commit an older
    #: owner still sends is refused.
    fences: Mapping[str, int] = attrs.field(factory=dict)
    #: Compaction is clean before this segment (docs/compaction.md): a compaction finished
    #: there with every segment that lost records rewritten, so no key has a record there
    #: but its latest. Tombstones before it may go; what is after it is the dirty part.
    compacted_until: int = 0
    #: Where the last compaction ended (a segment number): the bytes from there on are the
    #: dirty part a scheduled compaction waits for (``min_dirty_ratio``).
    compaction_end: int = 0
    version: int = -1

    # -- queries ---------------------------------------------------------------------

    def segment(self, number: int) -> Segment | None:
        for seg in self.segments:
            if seg.number == number:
                return seg
        return None

    def segment_at_or_after(self, number: int) -> Segment | None:
        for seg in self.segments:
            if seg.number >= number:
                return seg
        return None

    def open_segments(self) -> list[Segment]:
        return [s for s in self.segments if not s.closed]

    def ledger_ids(self) -> set[int]:
        return {i for s in self.segments for i in s.ledgers()} | set(self.spares) | set(self.garbage) | self.staged_ids()

    def staged_ids(self) -> set[int]:
        return {s.ledger_id for s in self.staged}

    def discarded(self, group: str) -> bool:
        """The staging ``group`` was discarded: its ledgers are not wanted any more."""
        return self.commit(DISCARD_PREFIX + group) is not None

    def commit(self, token: str) -> Commit | None:
        for c in self.commits:
            if c.token == token:
                return c
        return None

    @property
    def start(self) -> Position:
        """The earliest position that was not trimmed."""
        if self.chunks:
            first = self.chunks[0].first
        else:
            first = self.segments[0].number if self.segments else self.next_segment
        return Position(max(first, self.first_segment), 0)

    @property
    def length(self) -> int:
        """Bytes in the closed segments."""
        return sum(c.length for c in self.chunks) + sum(s.length for s in self.segments if s.closed)

    @property
    def segment_count(self) -> int:
        return sum(c.count for c in self.chunks) + len(self.segments)

    # -- changes (each returns a new record; the caller stores it with a CAS) ---------

    def replace_segment(self, seg: Segment) -> LogMetadata:
        return attrs.evolve(self, segments=tuple(seg if s.number == seg.number else s for s in self.segments))

    def add_segment(
        self,
        ledger_id: int,
        *,
        now: float,
        closed: bool = False,
        last_entry_id: int = -1,
        length: int = 0,
        format: int = FORMAT_ENVELOPE,
        min_ts: int = -1,
        max_ts: int = -1,
    ) -> LogMetadata:
        seg = Segment(
            self.next_segment, ledger_id, closed, last_entry_id, length, created_at=now,
            closed_at=now if closed else 0.0, format=format, min_ts=min_ts, max_ts=max_ts,
        )
        return attrs.evolve(self, segments=(*self.segments, seg), next_segment=self.next_segment + 1)

    def drop_segments(self, numbers: Iterable[int]) -> LogMetadata:
        """Remove segments that never held an acknowledged entry (empty, or written after
        entries lost in flight) and list their ledgers as garbage. Their numbers are handed
        out again if they were the last ones: no position ever named an entry in them."""
        gone = set(numbers)
        dropped = [s for s in self.segments if s.number in gone]
        kept = tuple(s for s in self.segments if s.number not in gone)
        next_segment = self.next_segment
        if dropped:
            highest_kept = max((s.number for s in kept), default=self.chunks[-1].last if self.chunks else -1)
            lowest_dropped = min(s.number for s in dropped)
            if lowest_dropped > highest_kept:
                next_segment = max(lowest_dropped, self.first_segment)
        return attrs.evolve(self, segments=kept, next_segment=next_segment).with_garbage(s.ledger_id for s in dropped)

    def unstage(self, *, token: str | None = None, group: str | None = None, keep: Iterable[int] = ()) -> LogMetadata:
        """Drop the staged ledgers of ``token`` (or of ``group``): those in ``keep`` became
        segments, the others go to the garbage."""
        kept = set(keep)
        gone = [s for s in self.staged if s.token == token or s.group == group]
        if not gone:
            return self
        rest = tuple(s for s in self.staged if s not in gone)
        return attrs.evolve(self, staged=rest).with_garbage(s.ledger_id for s in gone if s.ledger_id not in kept)

    def with_commit(self, commit: Commit) -> LogMetadata:
        return attrs.evolve(self, commits=(*self.commits, commit)[-TOKEN_HISTORY:])

    def with_garbage(self, ledger_ids: Iterable[int]) -> LogMetadata:
        extra = tuple(i for i in ledger_ids if i not in self.garbage)
        return attrs.evolve(self, garbage=self.garbage + extra)

    def with_fence(self, name: str, epoch: int) -> LogMetadata:
        return attrs.evolve(self, fences={**self.fences, name: epoch})

    def without_fence(self, name: str) -> LogMetadata:
        return attrs.evolve(self, fences={k: v for k, v in self.fences.items() if k != name})

    def without_garbage(self, ledger_ids: Iterable[int]) -> LogMetadata:
        gone = set(ledger_ids)
        return attrs.evolve(self, garbage=tuple(i for i in self.garbage if i not in gone))

    # -- storage ----------------------------------------------------------------------

    def serialize(self) -> bytes:
        d = {
            "name": self.name,
            "settings": self.settings.to_json(),
            "password_hash": self.password_hash,
            "uid": self.uid,
            "created_at": self.created_at,
            "segments": [s.to_json() for s in self.segments],
            "chunks": [c.to_json() for c in self.chunks],
            "next_segment": self.next_segment,
            "first_segment": self.first_segment,
            "writer": self.writer,
            "writer_epoch": self.writer_epoch,
            "spares": list(self.spares),
            "garbage": list(self.garbage),
            "commits": [[c.token, c.first_segment, c.last_segment, c.committed_at] for c in self.commits],
            "staged": [[s.ledger_id, s.token, s.group] for s in self.staged],
            "trimmed_entries": self.trimmed_entries,
            "trimmed_bytes": self.trimmed_bytes,
        }
        if self.fences:  # stored only when set: a log without them stays readable by older releases
            d["fences"] = dict(self.fences)
        if self.compacted_until:
            d["compacted_until"] = self.compacted_until
        if self.compaction_end:
            d["compaction_end"] = self.compaction_end
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def deserialize(cls, data: bytes, version: int) -> LogMetadata:
        try:
            raw = json.loads(data)
            return cls(
                name=raw["name"],
                settings=LogSettings.from_json(raw["settings"]),
                password_hash=raw["password_hash"],
                uid=raw["uid"],
                created_at=raw["created_at"],
                segments=tuple(Segment.from_json(s) for s in raw["segments"]),
                chunks=tuple(Chunk.from_json(c) for c in raw.get("chunks", ())),
                next_segment=raw["next_segment"],
                first_segment=raw["first_segment"],
                writer=raw["writer"],
                writer_epoch=raw["writer_epoch"],
                spares=tuple(raw["spares"]),
                garbage=tuple(raw["garbage"]),
                commits=tuple(Commit(str(t), int(f), int(last), float(at)) for t, f, last, at in raw["commits"]),
                staged=tuple(Staged(int(i), str(t), str(g)) for i, t, g in raw.get("staged", ())),
                trimmed_entries=raw.get("trimmed_entries", 0),
                trimmed_bytes=raw.get("trimmed_bytes", 0),
                fences={str(k): int(v) for k, v in raw.get("fences", {}).items()},
                compacted_until=int(raw.get("compacted_until", 0)),
                compaction_end=int(raw.get("compaction_end", 0)),
                version=version,
            )
        except (ValueError, TypeError, KeyError) as e:
            raise MetadataError(f"stored log metadata does not parse: {e!r}") from None


# -- cursors ---------------------------------------------------------------------------


@attrs.frozen
class Cursor:
    """A consumer's durable place in a log: every entry before ``position`` is acknowledged,
    so reading resumes at ``position``."""

    log: str
    name: str
    position: Position
    log_uid: str = ""
    #: When it was last moved (an ack stored, a move): what its inactivity counts from.
    updated_at: float = attrs.field(factory=time.time)
    version: int = -1
    #: Inactivity TTL (s): not moved for this long, it stops holding retention back (see
    #: :meth:`expired`); None: the log's ``cursor_ttl_s``.
    ttl_s: float | None = attrs.field(default=None, validator=_positive_or_none)
    #: What else the record holds, kept as stored: a subscription's record is a cursor
    #: record with its state's part (bkframe.subscriptions.settings); moving it as a cursor
    #: (a forced trim) must not drop that.
    extra: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def subscription(self) -> bool:
        """This record is a subscription's (docs/subscriptions.md), not a plain cursor's."""
        return "subscription" in self.extra

    def effective_ttl(self, settings: LogSettings) -> float | None:
        return self.ttl_s if self.ttl_s is not None else settings.cursor_ttl_s

    def expired(self, settings: LogSettings, now: float) -> bool:
        """Inactive past its TTL: retention no longer waits for it (a trim moves it on)."""
        ttl = self.effective_ttl(settings)
        return ttl is not None and now - self.updated_at >= ttl

    def serialize(self) -> bytes:
        d: dict[str, Any] = {"position": str(self.position), "log_uid": self.log_uid, "updated_at": self.updated_at}
        if self.ttl_s is not None:
            d["ttl_s"] = self.ttl_s
        d.update(self.extra)
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def deserialize(cls, log: str, name: str, data: bytes, version: int) -> Cursor:
        try:
            raw = json.loads(data)
            ttl = raw.get("ttl_s")
            extra = {k: v for k, v in raw.items() if k not in _CURSOR_KEYS}
            return cls(
                log, name, Position.parse(raw["position"]), raw["log_uid"], raw["updated_at"], version,
                float(ttl) if ttl is not None else None, extra,
            )
        except (ValueError, TypeError, KeyError) as e:
            raise MetadataError(f"stored cursor {name!r} of log {log!r} does not parse: {e!r}") from None


_CURSOR_KEYS = frozenset({"position", "log_uid", "updated_at", "ttl_s"})


# -- reading results -------------------------------------------------------------------


@attrs.frozen
class LogEntry:
    """One entry of a log as read: its payload, and the envelope's key, timestamp (ms since
    the epoch; None in a raw segment) and properties. ``event_time``: the timestamp is the
    writer's event time, not the time it was appended."""

    position: Position
    ledger_id: int
    payload: bytes
    key: bytes | None = None
    timestamp: int | None = None
    properties: Mapping[str, str] = NO_PROPERTIES
    event_time: bool = False


@attrs.frozen
class SegmentRange:
    """Confirmed entries ``first..last`` (inclusive) of one segment: a unit of reading."""

    segment: int
    ledger_id: int
    first: int
    last: int
    #: The segment's :attr:`Segment.format`: how to decode its entries.
    format: int = FORMAT_RAW
    #: The segment's recorded :attr:`Segment.min_ts` and ``max_ts`` (-1: not known), to
    #: skip it by time without reading it; its average entry size in bytes when closed (0:
    #: not known), to size reads.
    min_ts: int = -1
    max_ts: int = -1
    entry_size: int = 0
    #: Where the segment's object is, if it is offloaded (readers that read Parquet
    #: themselves -- Spark, DuckDB -- read it there; :mod:`bkframe.tiering.offload_record`).
    offload: Offload | None = None
    #: Set if compaction rewrote the segment: its ledger's entries are the records kept,
    #: then their index (:mod:`bkframe.client.logs.compacted`); ``first..last`` are
    #: positions, some of them dropped.
    compacted: Compacted | None = None
    #: The segment's last entry id when it is closed (-1: open): whether the range is the
    #: whole segment, whatever it holds.
    segment_last: int = -1

    @property
    def whole_segment(self) -> bool:
        return self.first == 0 and self.segment_last >= 0 and self.last == self.segment_last

    @property
    def entries(self) -> int:
        """Positions in the range (a compacted segment holds only some of them)."""
        return max(0, self.last - self.first + 1)

    @property
    def enveloped(self) -> bool:
        """Its entries are records in envelopes (:func:`bkframe.decode_record` reads one)."""
        return self.format == FORMAT_ENVELOPE


@attrs.frozen
class CommitResult:
    """What ``commit_ledgers`` did: the segments its ledgers became (empty ledgers become none).
    ``replayed``: the token had been committed before, and this is that first result."""

    token: str
    segments: tuple[int, ...]
    replayed: bool = attrs.field(default=False, eq=False)


@attrs.frozen
class TrimResult:
    """Segments a trim removed (their ledgers are deleted), and the log's new start."""

    removed: tuple[Segment, ...]
    start: Position
    #: Cursors the trim moved forward to the new start: all it passed if forced, else the
    #: expired ones it passed (idle past their TTL).
    moved_cursors: tuple[str, ...] = ()
