"""The plugin manager: built-ins first, then entry points, behind a small typed facade.

Plugins register components (:mod:`bkframe.core.registry`); the manager makes the parts
of a bookie or a client from them, validating each config section with the component's
config class. A third-party plugin that fails to load (its import raises, it implements
an unknown hook, its registration raises) is reported -- ``bkframe plugins`` lists it, a
warning is logged -- and left out; it never stops the others. Third-party plugins can be
left out on purpose: ``disabled=`` (the bookie passes ``[plugins] disable``) and
``$BKFRAME_DISABLE_PLUGINS`` (comma-separated entry-point names).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable, Mapping
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from bkframe.core import hookspecs
from bkframe.core.config import Config, declared_directories, parse_section
from bkframe.core.interfaces.auth import DEFAULT_PROVIDER as DEFAULT_AUTH_PROVIDER
from bkframe.core.interfaces.auth import READERS_KEY, AuthProvider, readers_of
from bkframe.core.registry import Component, ComponentKind, ComponentRegistry, LedgerTypes, PluginDefectError
from bkframe.errors import ConfigError, MetadataError, PluginError

if TYPE_CHECKING:  # what the parts are; a process that makes none of them does not import them (trio)
    from bkframe.core.counters import Counters
    from bkframe.core.interfaces.durability import DurabilityPolicy
    from bkframe.core.interfaces.entry_log import EntryLogManager
    from bkframe.core.interfaces.journal import Journal
    from bkframe.core.interfaces.ledger_storage import LedgerStorage
    from bkframe.core.interfaces.metadata_store import MetadataStore
    from bkframe.core.interfaces.placement import PlacementPolicy
    from bkframe.core.interfaces.tier import Tier

log = logging.getLogger("bkframe.plugins")

#: Built-in plugins, registered before any entry point, in this order.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "bkframe.plugins.durability",
    "bkframe.plugins.entry_log_single",
    "bkframe.plugins.ledger_storage_default",
    "bkframe.plugins.metadata_memory",
    "bkframe.plugins.metadata_sqlite",
    "bkframe.plugins.placement",
    "bkframe.plugins.auth",
    "bkframe.plugins.tier_filesystem",
)

#: Plugins of the distributions bkframe depends on for its defaults (entry-point name, module,
#: distribution): registered right after the built-ins, always -- a manager without entry
#: points (tests) and a config's ``disable`` included -- because a default bookie cannot run
#: without them. They are written as any third party's plugin is (plugins/journal_fs).
DEFAULT_DISTRIBUTED_PLUGINS: tuple[tuple[str, str, str], ...] = (
    ("journal_fs", "bkframe_journal_fs.plugin", "bkframe-journal-fs"),
)

#: Tier schemes served by distributions of this repository, for the error that names what to install.
KNOWN_TIER_DISTRIBUTIONS = {"s3": "bkframe-tier-s3"}
#: Components served by distributions of this repository (plugins/), by config section and
#: plugin name, for the error that names what to install. The default journal's distribution
#: (bkframe-journal-fs) is a dependency of bkframe: a plain install has it.
KNOWN_COMPONENT_DISTRIBUTIONS = {
    ("journal", "journal_fs"): "bkframe-journal-fs",
    ("entry_log_manager", "per_ledger"): "bkframe-entrylog-per-ledger",
}

#: Hooks of earlier versions, now registrations in ``bkframe_register_components``: a plugin
#: still implementing one is told what to write instead.
RETIRED_HOOKS = {
    "bkframe_placement_policy": "registry.add_placement_policy(name, factory, config=C)",
    "bkframe_auth_provider": "registry.add_auth_provider(name, factory, config=C)",
}

ENTRY_POINT_GROUP = "bkframe"
#: Comma-separated entry-point names of plugins not to load.
DISABLE_ENV = "BKFRAME_DISABLE_PLUGINS"

#: Config sections made by a component, and the kind of component.
SECTION_KINDS = {
    "journal": ComponentKind.JOURNAL,
    "entry_log_manager": ComponentKind.ENTRY_LOG_MANAGER,
    "ledger_storage": ComponentKind.LEDGER_STORAGE,
}


@attrs.frozen
class PluginInfo:
    name: str
    distribution: str
    hooks: tuple[str, ...]


@attrs.frozen
class BrokenPlugin:
    """A third-party plugin left out because it failed: why, in one line."""

    name: str
    distribution: str
    error: str


class PluginManager:
    """Loads plugins and makes the parts of a bookie or a client from their components.

    One method per part, keyword-only. ``load_entry_points=False`` gives a manager with
    built-ins only (plus ``extra_plugins``), which tests use to stay hermetic.
    """

    def __init__(
        self,
        *,
        load_entry_points: bool = True,
        extra_plugins: Iterable[object] = (),
        disabled: Iterable[str] = (),
    ) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._dists: dict[str, str] = {}
        self._external: set[str] = set()
        #: Third-party plugins left out because they failed to load or register.
        self.broken: list[BrokenPlugin] = []
        env = [name.strip() for name in os.environ.get(DISABLE_ENV, "").split(",") if name.strip()]
        #: Entry-point names not to load (config and environment).
        self.disabled: frozenset[str] = frozenset([*disabled, *env])
        for modname in BUILTIN_PLUGINS:
            self.register(importlib.import_module(modname), name=modname, distribution="bkframe")
        for name, modname, distribution in DEFAULT_DISTRIBUTED_PLUGINS:
            try:
                module = importlib.import_module(modname)
            except ImportError as e:
                # Installed without its dependencies (pip --no-deps): everything but a bookie
                # on the default journal still works, and the bookie's error says what to install.
                self._broke(name, distribution, f"not installed ({e}): pip install {distribution}")
                continue
            self.register(module, name=name, distribution=distribution)
        if load_entry_points:
            self._load_entry_points()
        for plugin in extra_plugins:
            self.register(plugin)
        self._pm.check_pending()
        self._registry: ComponentRegistry | None = None

    def _load_entry_points(self) -> None:
        for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist is not None else "?"
            if ep.name in self.disabled or self._pm.get_plugin(ep.name) is not None:
                continue
            try:
                plugin = ep.load()
                self.register(plugin, name=ep.name, distribution=dist)
                self._check_hooks(ep.name)
            except Exception as e:  # noqa: BLE001 - any failure of a third party's code leaves only it out
                self._broke(ep.name, dist, f"cannot load {ep.value}: {type(e).__name__}: {e}")
                continue
            self._external.add(ep.name)

    def _check_hooks(self, name: str) -> None:
        """A hook implementation no spec knows (a misspelt hook) is an error of its plugin."""
        plugin = self._pm.get_plugin(name)
        for caller in self._pm.get_hookcallers(plugin) or ():
            if caller.name in RETIRED_HOOKS:
                raise PluginError(
                    f"it implements {caller.name}, which bkframe_register_components replaced: register the same "
                    f"components there ({RETIRED_HOOKS[caller.name]})"
                )
            if not caller.has_spec():
                raise PluginError(f"it implements {caller.name}, which is no bkframe hook (misspelt?)")

    def _broke(self, name: str, distribution: str, error: str) -> None:
        if self._pm.get_plugin(name) is not None:
            self._pm.unregister(name=name)
        self.broken.append(BrokenPlugin(name, distribution, error))
        log.warning("plugin %s (%s) is left out: %s", name, distribution, error)

    def register(self, plugin: object, *, name: str | None = None, distribution: str = "(registered)") -> None:
        registered = self._pm.register(plugin, name=name)
        if registered is None:
            raise PluginError(f"plugin {name or plugin!r} is already registered")
        self._dists[registered] = distribution
        self._registry = None

    def plugins(self) -> list[PluginInfo]:
        out = []
        for name, plugin in self._pm.list_name_plugin():
            hooks = tuple(sorted(h.name for h in self._pm.get_hookcallers(plugin) or ()))
            out.append(PluginInfo(name=name, distribution=self._dists.get(name, "?"), hooks=hooks))
        return out

    # -- the registry ----------------------------------------------------------------------

    @property
    def components(self) -> ComponentRegistry:
        """Every registered component (plugins are asked once, in registration order)."""
        if self._registry is None:
            registry = ComponentRegistry()
            for impl in self._pm.hook.bkframe_register_components.get_hookimpls():
                name = impl.plugin_name
                registry.registering(name, self._dists.get(name, "?"))
                try:
                    impl.function(registry=registry)
                except Exception as e:
                    if name not in self._external or (isinstance(e, PluginError) and not isinstance(e, PluginDefectError)):
                        raise  # a name registered twice: an error of the installation, for all to see
                    registry.drop(name)
                    self._broke(name, self._dists.get(name, "?"), f"its registration failed: {type(e).__name__}: {e}")
            self._registry = registry
        return self._registry

    def _component(self, kind: ComponentKind, section: str, config: Mapping[str, Any], source: str) -> tuple[Component, Any]:
        """The component a config section names, and the section validated by its class."""
        name = config.get("plugin")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{source}: [{section}] needs a 'plugin' name (a string)")
        known = KNOWN_COMPONENT_DISTRIBUTIONS.get((section, name))
        remedy = f"Install {known} (pip install {known})." if known else "Run 'bkframe plugins' to see what is installed."
        keys = {k: v for k, v in config.items() if k != "plugin"}
        named, where = f"{source}: [{section}] plugin = {name!r}", f"{source}: [{section}] (plugin {name!r})"
        return self._configured(kind, name, keys, named=named, where=where, remedy=remedy)

    def _configured(
        self, kind: ComponentKind, name: object, options: Mapping[str, Any], *, named: str, where: str, remedy: str = ""
    ) -> tuple[Component, Any]:
        """The component registered as ``name`` (``named``: where a config names it), and
        ``options`` validated by its config class (``where``: how its errors name them)."""
        component = self.components.get(kind, name) if isinstance(name, str) else None
        if component is None:
            raise ConfigError(
                f"{named}: no installed plugin provides it (installed: "
                f"{', '.join(self.components.names(kind)) or 'none'})" + (f". {remedy}" if remedy else "")
            )
        assert component.config is not None
        return component, parse_section(component.config, options, where=where)

    def check_config(self, config: Config) -> None:
        """Validate every component section of ``config`` now (a bookie does it as it starts)."""
        for section, kind in SECTION_KINDS.items():
            self._component(kind, section, getattr(config, section), config.source)
        self.placement_policy_from_section(config.placement, source=f"{config.source}: [placement]")
        auth = self.auth_provider_from_section(config.auth, source=f"{config.source}: [auth]")
        if auth.needs_client_certificate and not (config.tls.enabled and config.tls.require_client_cert):
            raise ConfigError(
                f"{config.source}: [auth] provider = {config.auth.get('provider')!r} takes the principal from the "
                "client certificate: it needs [tls] enabled = true and require_client_cert = true"
            )

    def placement_policy_from_section(self, section: Mapping[str, Any], *, source: str) -> PlacementPolicy:
        """The policy a ``[placement]`` section names (``policy = NAME``, its options as the other keys)."""
        options = dict(section)
        name = options.pop("policy", "random")
        if not isinstance(name, str):
            raise ConfigError(f"{source}: policy = {name!r} should be a string")
        return self.placement_policy(name, options, source=source)

    # -- making parts ------------------------------------------------------------------------

    def _make(self, section: str, config: Mapping[str, Any], source: str, *args: object) -> Any:
        """What the component a section names makes of the validated section and ``args``."""
        component, settings = self._component(SECTION_KINDS[section], section, config, source)
        return component.factory(settings, *args)

    def directories(self, *, section: str, config: Mapping[str, Any], directory: Path, source: str = "(config)") -> list[Path]:
        """Every directory the component a ``section`` names writes: ``directory`` (what the
        bookie hands it), then those its config keys declare
        (:func:`~bkframe.core.config.directory_field`). The bookie locks them all before it
        makes the component (:mod:`bkframe.storage_kit.directory_lock`)."""
        _, settings = self._component(SECTION_KINDS[section], section, config, source)
        return [directory, *declared_directories(settings, directory)]

    def journal(
        self, *, config: Mapping[str, Any], directory: Path, counters: Counters, source: str = "(config)"
    ) -> Journal:
        """The journal the ``[journal]`` section names."""
        journal: Journal = self._make("journal", config, source, directory, counters)
        return journal

    def entry_log_manager(
        self, *, config: Mapping[str, Any], directory: Path, counters: Counters, source: str = "(config)"
    ) -> EntryLogManager:
        """The entry-log manager the ``[entry_log_manager]`` section names."""
        manager: EntryLogManager = self._make("entry_log_manager", config, source, directory, counters)
        return manager

    def ledger_storage(
        self,
        *,
        config: Mapping[str, Any],
        directory: Path,
        entry_logs: EntryLogManager,
        counters: Counters,
        source: str = "(config)",
    ) -> LedgerStorage:
        """The ledger storage the ``[ledger_storage]`` section names."""
        storage: LedgerStorage = self._make("ledger_storage", config, source, directory, entry_logs, counters)
        return storage

    def metadata_store(self, uri: str, *, create: bool = False) -> MetadataStore:
        """Open the metadata store ``uri`` names. Only bookies and the sandbox pass
        ``create=True``; a client pointed at a store that does not exist gets a clear error."""
        scheme = uri.partition("://")[0] if "://" in uri else ""
        component = self.components.get(ComponentKind.METADATA_STORE, scheme)
        if component is None:
            served = ", ".join(f"{s}://" for s in self.components.names(ComponentKind.METADATA_STORE))
            raise MetadataError(
                f"no installed plugin serves metadata URI {uri!r} (scheme {scheme or uri!r}); installed: {served}. "
                f"Run 'bkframe plugins' to see what is installed."
            )
        store: MetadataStore = component.factory(uri, create=create)
        return store

    def tier(self, uri: str) -> Tier:
        """Open the object-store tier ``uri`` names (``file:///srv/tier``, ``s3://bucket/prefix?...``),
        by its scheme; an unknown scheme is a :class:`ConfigError` naming the installed ones
        (and the distribution that serves it, for the schemes bkframe knows of)."""
        scheme = uri.partition("://")[0] if "://" in uri else ""
        component = self.components.get(ComponentKind.TIER, scheme)
        if component is None:
            served = ", ".join(f"{s}://" for s in self.components.names(ComponentKind.TIER)) or "none"
            known = KNOWN_TIER_DISTRIBUTIONS.get(scheme)
            install = f"install {known} for {scheme}:// URIs" if known else "run 'bkframe plugins' to see what is installed"
            # The URI is not echoed: an unknown scheme may be a URI with credentials in it.
            raise ConfigError(
                f"no installed plugin serves tier URIs of scheme {scheme or '(none)'!r} (installed: {served}); {install}"
            )
        tier: Tier = component.factory(uri)
        return tier

    def placement_policy(self, name: str, options: Mapping[str, Any], *, source: str = "placement") -> PlacementPolicy:
        """The placement policy registered as ``name``, made with ``options`` validated
        against its config class (unknown names and keys are clear :class:`ConfigError` s)."""
        what = f"{source}: placement policy {name!r}"
        component, config = self._configured(ComponentKind.PLACEMENT_POLICY, name, options, named=what, where=what)
        policy: PlacementPolicy = component.factory(config)
        return policy

    def auth_provider_from_section(self, section: Mapping[str, Any], *, source: str) -> AuthProvider:
        """The provider an ``[auth]`` section names (``provider = NAME``, its options as the
        other keys but ``readers``, the bookie's own: checked here, left to it); unknown names
        and keys are clear :class:`ConfigError` s."""
        options = dict(section)
        name = options.pop("provider", DEFAULT_AUTH_PROVIDER)
        readers_of(options, source=source)
        options.pop(READERS_KEY, None)  # the bookie's, not the provider's (see bkframe.core.interfaces.auth)
        named, where = f"{source}: provider = {name!r}", f"{source} (provider {name!r})"
        component, config = self._configured(ComponentKind.AUTH_PROVIDER, name, options, named=named, where=where)
        try:
            provider: AuthProvider = component.factory(config)
        except ValueError as e:
            raise ConfigError(f"{source} (provider {name!r}): {e}") from None
        return provider

    # -- ledger types ------------------------------------------------------------------------

    def ledger_types(self) -> LedgerTypes:
        """Every registered ledger type by name."""
        return self.components.ledger_types()

    def ledger_type(self, name: str) -> DurabilityPolicy:
        return self.ledger_types().named(name)

    def ledger_type_by_id(self, type_id: int) -> DurabilityPolicy | None:
        return self.ledger_types().by_id(type_id)
