"""The plugin manager: built-ins first, then entry points, behind a small typed facade."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import attrs
import pluggy

from bkframe.core import hookspecs
from bkframe.core.counters import Counters
from bkframe.core.interfaces import DurabilityPolicy, EntryLogManager, Journal, LedgerStorage
from bkframe.core.metadata import MetadataStore
from bkframe.errors import ConfigError, MetadataError, UnknownLedgerTypeError

#: Built-in plugins, registered before any entry point, in this order.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "bkframe.plugins.durability",
    "bkframe.plugins.entry_log_single",
    "bkframe.plugins.ledger_storage_default",
    "bkframe.plugins.metadata_memory",
    "bkframe.plugins.metadata_sqlite",
)

ENTRY_POINT_GROUP = "bkframe"


class LedgerTypes(Mapping[str, DurabilityPolicy]):
    """The registered ledger types by name (a read-only mapping), with lookups that fail clearly."""

    def __init__(self, by_name: Mapping[str, DurabilityPolicy]) -> None:
        self._by_name = dict(by_name)
        self._by_id = {policy.type_id: policy for policy in self._by_name.values()}

    def __getitem__(self, name: str) -> DurabilityPolicy:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def named(self, name: str) -> DurabilityPolicy:
        """The type called ``name``; :class:`UnknownLedgerTypeError` listing the known ones if none is."""
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownLedgerTypeError(
                f"unknown ledger type {name!r}; known types: {', '.join(sorted(self._by_name))}"
            ) from None

    def by_id(self, type_id: int) -> DurabilityPolicy | None:
        """The type with wire id ``type_id``, if one is registered."""
        return self._by_id.get(type_id)


@attrs.frozen
class PluginInfo:
    name: str
    distribution: str
    hooks: tuple[str, ...]


class PluginManager:
    """Loads plugins and asks them for the parts of a bookie.

    One method per hook, keyword-only. ``load_entry_points=False`` gives a manager with
    built-ins only (plus whatever a test registers), which tests use to stay hermetic.
    """

    def __init__(self, *, load_entry_points: bool = True, extra_plugins: Iterable[object] = ()) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._dists: dict[str, str] = {}
        for modname in BUILTIN_PLUGINS:
            self.register(importlib.import_module(modname), name=modname, distribution="bkframe")
        if load_entry_points:
            for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP):
                if self._pm.get_plugin(ep.name) is not None:
                    continue
                plugin = ep.load()
                dist = ep.dist.name if ep.dist is not None else "?"
                self.register(plugin, name=ep.name, distribution=dist)
        for plugin in extra_plugins:
            self.register(plugin)
        self._pm.check_pending()
        self._ledger_types: LedgerTypes | None = None

    def register(self, plugin: object, *, name: str | None = None, distribution: str = "(registered)") -> None:
        registered = self._pm.register(plugin, name=name)
        if registered is None:
            raise ValueError(f"plugin {name or plugin!r} is already registered")
        self._dists[registered] = distribution
        self._ledger_types = None

    def plugins(self) -> list[PluginInfo]:
        out = []
        for name, plugin in self._pm.list_name_plugin():
            hooks = tuple(sorted(h.name for h in self._pm.get_hookcallers(plugin) or ()))
            out.append(PluginInfo(name=name, distribution=self._dists.get(name, "?"), hooks=hooks))
        return out

    # -- factories ---------------------------------------------------------------------

    def journal(self, *, config: dict[str, Any], directory: Path, counters: Counters) -> Journal:
        name = _plugin_name(config, "journal")
        journal = self._pm.hook.bkframe_journal(name=name, config=config, directory=directory, counters=counters)
        return _found(journal, "journal", name)

    def entry_log_manager(self, *, config: dict[str, Any], directory: Path, counters: Counters) -> EntryLogManager:
        name = _plugin_name(config, "entry_log_manager")
        mgr = self._pm.hook.bkframe_entry_log_manager(name=name, config=config, directory=directory, counters=counters)
        return _found(mgr, "entry_log_manager", name)

    def ledger_storage(
        self, *, config: dict[str, Any], directory: Path, entry_logs: EntryLogManager, counters: Counters
    ) -> LedgerStorage:
        name = _plugin_name(config, "ledger_storage")
        storage = self._pm.hook.bkframe_ledger_storage(
            name=name, config=config, directory=directory, entry_logs=entry_logs, counters=counters
        )
        return _found(storage, "ledger_storage", name)

    def metadata_store(self, uri: str) -> MetadataStore:
        store = self._pm.hook.bkframe_metadata_store(uri=uri)
        if store is None:
            scheme = uri.partition("://")[0] if "://" in uri else uri
            raise MetadataError(
                f"no installed plugin serves metadata URI {uri!r} (scheme {scheme!r}); "
                f"built in: sqlite:///PATH, memory://NAME. Run 'bkframe plugins' to see what is installed."
            )
        return store  # type: ignore[no-any-return]

    # -- ledger types ------------------------------------------------------------------

    def ledger_types(self) -> LedgerTypes:
        """Every registered ledger type by name."""
        if self._ledger_types is None:
            types: dict[str, DurabilityPolicy] = {}
            by_id: dict[int, str] = {}

            def register(policy: DurabilityPolicy) -> None:
                if policy.name in types:
                    raise ValueError(f"ledger type {policy.name} is registered twice")
                if policy.type_id in by_id:
                    raise ValueError(
                        f"ledger types {by_id[policy.type_id]} and {policy.name} both use wire id {policy.type_id}"
                    )
                if not 0 <= policy.type_id <= 0xFFFF:
                    raise ValueError(f"ledger type {policy.name}: wire id {policy.type_id} is not in 0..65535")
                types[policy.name] = policy
                by_id[policy.type_id] = policy.name

            self._pm.hook.bkframe_register_ledger_types(register=register)
            self._ledger_types = LedgerTypes(types)
        return self._ledger_types

    def ledger_type(self, name: str) -> DurabilityPolicy:
        return self.ledger_types().named(name)

    def ledger_type_by_id(self, type_id: int) -> DurabilityPolicy | None:
        return self.ledger_types().by_id(type_id)


def _plugin_name(config: dict[str, Any], section: str) -> str:
    name = config.get("plugin")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"[{section}] needs a 'plugin' name (a string)")
    return name


def _found(obj: Any, section: str, name: str) -> Any:
    if obj is None:
        raise ConfigError(
            f"[{section}] plugin = {name!r}: no installed plugin provides it. "
            f"Run 'bkframe plugins' to see what is installed."
        )
    return obj

