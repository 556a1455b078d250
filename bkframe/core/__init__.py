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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Where each name is defined: imported on first use (PEP 562), so that importing one module of
#: bkframe.core (the errors, the config) does not import every protocol and trio with them.
#: Type checkers read the imports above; tests/test_public_api.py checks that both agree.
_DEFINED_IN: dict[str, tuple[str, ...]] = {
    "bkframe.core.config": ("NoConfig", "above", "at_least", "at_most", "between", "directory_field"),
    "bkframe.core.counters": ("Counters", "Histogram"),
    "bkframe.core.heartbeat": ("Heartbeat",),
    "bkframe.core.hookspecs": ("hookimpl",),
    "bkframe.core.interfaces": ("Buffer", "Spawner"),
    "bkframe.core.interfaces.auth": ("AuthenticationError", "AuthProvider", "Peer"),
    "bkframe.core.interfaces.durability": ("DurabilityPolicy", "LedgerType"),
    "bkframe.core.interfaces.entry_log": ("EntryLogManager",),
    "bkframe.core.interfaces.journal": ("Journal", "JournalCorruptError", "JournalPosition", "JournalWriteError"),
    "bkframe.core.interfaces.ledger_storage": (
        "BackgroundStorage", "LedgerState", "LedgerStorage", "RangeReadStorage", "WriteOnceStorage",
    ),
    "bkframe.core.interfaces.metadata_store": ("BookieRegistration", "Lock", "MetadataStore", "MultiLogStore"),
    "bkframe.core.interfaces.placement": ("Candidate", "PlacementError", "PlacementPolicy"),
    "bkframe.core.interfaces.tier": ("InvalidKeyError", "ObjectInfo", "Tier"),
    "bkframe.core.registry": ("ComponentKind", "ComponentRegistry"),
}
_MODULE_OF = {name: module for module, names in _DEFINED_IN.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'bkframe.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
