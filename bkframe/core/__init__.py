"""What a plugin is written against: the hook marker, the registry its registration hook
fills, the protocols its parts implement, and the helpers its config class and counters use.

A third-party plugin needs nothing of bkframe beyond this package and
:mod:`bkframe.storage_kit` (helpers for files on disk); ``from bkframe.core import ...``
names every part of that surface (``__all__``), each defined in its own module here:
:mod:`.hookspecs`, :mod:`.registry`, :mod:`.interfaces` (one module per protocol),
:mod:`.config`, :mod:`.counters`, :mod:`.heartbeat` (a lease's keep-alive), :mod:`.metadata`
(the ledger and log model a metadata store keeps) and :mod:`.ledger_keys`. docs/plugins.md
is the guide.
"""

from __future__ import annotations

from bkframe.core.config import NoConfig, above, at_least, at_most, between, directory_field
from bkframe.core.counters import Counters, Histogram
from bkframe.core.heartbeat import Heartbeat
from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces import Buffer, Spawner
from bkframe.core.interfaces.auth import AuthenticationError, AuthProvider, Peer
from bkframe.core.interfaces.durability import DurabilityPolicy, LedgerType
from bkframe.core.interfaces.entry_log import EntryLogManager
from bkframe.core.interfaces.journal import Journal, JournalCorruptError, JournalPosition, JournalWriteError
from bkframe.core.interfaces.ledger_storage import (
    BackgroundStorage,
    LedgerState,
    LedgerStorage,
    RangeReadStorage,
    WriteOnceStorage,
)
from bkframe.core.interfaces.metadata_store import BookieRegistration, Lock, MetadataStore, MultiLogStore
from bkframe.core.interfaces.placement import Candidate, PlacementError, PlacementPolicy
from bkframe.core.interfaces.tier import InvalidKeyError, ObjectInfo, Tier
from bkframe.core.registry import ComponentKind, ComponentRegistry

__all__ = [
    "AuthProvider",
    "AuthenticationError",
    "BackgroundStorage",
    "BookieRegistration",
    "Buffer",
    "Candidate",
    "ComponentKind",
    "ComponentRegistry",
    "Counters",
    "DurabilityPolicy",
    "EntryLogManager",
    "Heartbeat",
    "Histogram",
    "InvalidKeyError",
    "Journal",
    "JournalCorruptError",
    "JournalPosition",
    "JournalWriteError",
    "LedgerState",
    "LedgerStorage",
    "LedgerType",
    "Lock",
    "MetadataStore",
    "MultiLogStore",
    "NoConfig",
    "ObjectInfo",
    "Peer",
    "PlacementError",
    "PlacementPolicy",
    "RangeReadStorage",
    "Spawner",
    "Tier",
    "WriteOnceStorage",
    "above",
    "at_least",
    "at_most",
    "between",
    "directory_field",
    "hookimpl",
]
