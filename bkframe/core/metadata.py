"""The metadata model: ledger metadata, bookie registrations, the cluster record, marks of
under-replicated ledgers. The store that keeps them is :mod:`bkframe.core.interfaces.metadata_store`.

Every update of ledger metadata is a compare-and-set on ``version``: read, ``attrs.evolve``,
``update_ledger(new, expected_version=old.version)``. A store raises
:class:`BadVersionError` when someone else updated first.

Named logs (:mod:`bkframe.client.logs.model`) keep one record per log and one per cursor;
stores hold them as opaque bytes with a version, compared-and-set like ledger metadata.

A store is a bkframe cluster once it holds a :class:`ClusterRecord` (made on purpose by
``bkframe cluster init``; :mod:`bkframe.common.cluster_record` checks it for bookies and clients).

The metadata errors (:class:`~bkframe.errors.MetadataError`,
:class:`~bkframe.errors.NoSuchLedgerError`, ...) are defined in :mod:`bkframe.errors`, and
imported from there.
"""

from __future__ import annotations

import enum
import json
import secrets
import time
import uuid
from collections.abc import Mapping
from typing import Any

import attrs

from bkframe.errors import (
    BookieIdInUseError,
    MetadataError,
)


class LedgerStateName(str, enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


class DigestType(str, enum.Enum):
    CRC32C = "CRC32C"
    HMAC_SHA256 = "HMAC_SHA256"


def _quorums(instance: LedgerMetadata, attribute: attrs.Attribute[Any], value: Any) -> None:
    e, w, a = instance.ensemble_size, instance.write_quorum, instance.ack_quorum
    if not (e >= w >= a >= 1):
        raise ValueError(f"quorum sizes must satisfy E >= W >= A >= 1, got E={e} W={w} A={a}")


def _fragments(instance: LedgerMetadata, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    first_ids = [first for first, _ in value]
    if first_ids != sorted(set(first_ids)):
        raise ValueError(f"fragments must start at strictly increasing entry ids, got {first_ids}")
    if value and value[0][0] != 0:
        raise ValueError("the first fragment must start at entry 0")
    for first, ensemble in value:
        if len(ensemble) != instance.ensemble_size:
            raise ValueError(f"fragment at entry {first} has {len(ensemble)} bookies, ensemble size is {instance.ensemble_size}")
        if len(set(ensemble)) != len(ensemble):
            raise ValueError(f"fragment at entry {first} names a bookie twice: {ensemble}")


#: (first entry id, bookie ids) per fragment, ordered by first entry id.
Fragments = tuple[tuple[int, tuple[str, ...]], ...]


def ensemble_at(fragments: Fragments, entry_id: int) -> tuple[str, ...]:
    """The ensemble of the fragment that holds ``entry_id``."""
    chosen = fragments[0][1]
    for first, ensemble in fragments:
        if first > entry_id:
            break
        chosen = ensemble
    return chosen


@attrs.frozen
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int = attrs.field(validator=_quorums)
    write_quorum: int
    ack_quorum: int
    fragments: Fragments = attrs.field(converter=lambda fs: tuple((int(f), tuple(ens)) for f, ens in fs), validator=_fragments)
    ledger_type: str = "PD_JOURNAL"
    digest_type: DigestType = attrs.field(default=DigestType.CRC32C, converter=DigestType)
    password_hash: str = ""
    state: LedgerStateName = attrs.field(default=LedgerStateName.OPEN, converter=LedgerStateName)
    last_entry_id: int = -1
    length: int = 0
    custom: Mapping[str, str] = attrs.field(factory=dict, converter=lambda d: dict(sorted(dict(d).items())))
    created_at: float = attrs.field(factory=time.time)
    #: The writer that claimed the ledger (ledgers have a single writer); empty if unclaimed.
    writer: str = ""
    #: The store's version of this record; -1 before it is stored. CAS compares it.
    version: int = -1

    @property
    def closed(self) -> bool:
        return self.state == LedgerStateName.CLOSED

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble of the fragment that holds ``entry_id``."""
        return ensemble_at(self.fragments, entry_id)

    def bookies(self) -> set[str]:
        return {b for _, ensemble in self.fragments for b in ensemble}

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=False)
        d["fragments"] = [[first, list(ens)] for first, ens in self.fragments]
        d["digest_type"] = self.digest_type.value
        d["state"] = self.state.value
        d["custom"] = dict(self.custom)
        del d["version"]
        return d

    def to_public_json(self) -> dict[str, Any]:
        """What may be shown outside the store (HTTP API, ``bkframe ledger metadata``): all but
        the password's hash, which would let anyone test guesses offline; with the version."""
        d = self.to_json()
        d.pop("password_hash", None)
        return {**d, "version": self.version}

    def serialize(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def deserialize(cls, data: bytes, version: int) -> LedgerMetadata:
        try:
            raw = json.loads(data)
            return cls(**raw, version=version)
        except (ValueError, TypeError) as e:
            raise MetadataError(f"stored ledger metadata does not parse: {e}") from None


#: The layout of the metadata this bkframe writes (where each store keeps its records).
#: Stored in the cluster record: a process refuses a cluster whose layout it does not know.
#: 2: ledgers indexed by bookie (:meth:`MetadataStore.ledgers_of_bookie`), ZooKeeper's
#: ledgers in a hierarchy of at most 10^4 children per node.
LAYOUT_VERSION = 2

#: Ids per page where a caller pages through every ledger (:func:`iter_ledger_ids`).
LEDGER_PAGE = 10_000


@attrs.frozen
class ClusterRecord:
    """What makes a metadata store a bkframe cluster: written once, at the store's root, by
    ``bkframe cluster init`` (BookKeeper's ``initnewcluster``), and never changed after
    (an upgrade of the layout will rewrite ``layout_version``)."""

    #: How the store lays out its records (:data:`LAYOUT_VERSION` when made).
    layout_version: int
    #: A uuid naming this cluster.
    instance_id: str
    #: When it was made (``time.time()``).
    created_at: float
    #: The cluster-internal secret (32 random bytes): bookies and autorecovery prove they
    #: are the cluster's own with it (AUTH method ``bkframe-internal``). Never in a repr.
    secret: bytes = attrs.field(repr=False)

    @classmethod
    def new(cls) -> ClusterRecord:
        """A record for a new cluster: the current layout, a fresh id and secret."""
        return cls(LAYOUT_VERSION, uuid.uuid4().hex, time.time(), secrets.token_bytes(32))

    def describe(self) -> dict[str, Any]:
        """What may be shown: everything but the secret."""
        return {"layout_version": self.layout_version, "instance_id": self.instance_id, "created_at": self.created_at}

    def serialize(self) -> bytes:
        return json.dumps({**self.describe(), "secret": self.secret.hex()}, sort_keys=True).encode()

    @classmethod
    def deserialize(cls, data: bytes) -> ClusterRecord:
        """Reads any layout's record (keys it does not know are left), so that a process can
        name the layout it does not know rather than fail to parse it."""
        try:
            raw = json.loads(data)
            layout, instance, created = int(raw["layout_version"]), str(raw["instance_id"]), float(raw["created_at"])
            return cls(layout, instance, created, bytes.fromhex(raw["secret"]))
        except (ValueError, TypeError, KeyError) as e:
            raise MetadataError(f"the stored cluster record does not parse: {e!r}") from None


@attrs.frozen
class BookieInfo:
    """A registered bookie: where to reach it and whether it takes writes."""

    bookie_id: str
    address: str
    read_only: bool = False
    pid: int = 0
    #: Its rack (failure domain) label, ``[bookie] rack``; rack-aware placement spreads
    #: every write set over racks. "" is the default rack.
    rack: str = ""
    #: The instance id of its data dir's cookie: two registrations of one id with different
    #: instances are two bookies, and the second may not register (BookieIdInUseError).
    instance: str = ""

    def serialize(self) -> bytes:
        return json.dumps(attrs.asdict(self), sort_keys=True).encode()

    @classmethod
    def deserialize(cls, data: bytes) -> BookieInfo:
        return cls(**json.loads(data))

    def same_bookie(self, other: BookieInfo) -> bool:
        """Whether ``other`` (a registration of the same id) is this bookie, e.g. its previous
        life whose registration has not expired yet."""
        return self.bookie_id == other.bookie_id and self.instance == other.instance


def id_in_use(held: BookieInfo, wanted: BookieInfo) -> BookieIdInUseError:
    """The error for ``wanted`` registering an id a live ``held`` registration has."""
    return BookieIdInUseError(
        f"bookie id {wanted.bookie_id!r} is registered by another live bookie (at {held.address}, pid "
        f"{held.pid}, instance {held.instance or '?'}; this one is at {wanted.address}, instance "
        f"{wanted.instance or '?'}): two bookies may not share an id. Give this bookie its own id "
        f"([bookie] bookie_id / --bookie-id) or stop the other one; nothing was changed"
    )


@attrs.frozen
class Versioned:
    """A value with the store version it was read at (for cookies)."""

    value: bytes
    version: int


@attrs.frozen
class UnderReplicated:
    """A ledger marked for re-replication (autorecovery): the bookies it lost and since when.

    ``since`` is the wall-clock time (``time.time()``) of the first mark still standing;
    marking again adds bookies and keeps it."""

    ledger_id: int
    bookies: frozenset[str]
    since: float
