"""The component registry: what plugins provide, by kind and name.

Each plugin implements one hook, :func:`~bkframe.core.hookspecs.bkframe_register_components`,
and adds its components to the :class:`ComponentRegistry` it is handed (as tox plugins
register environments): journals, entry-log managers and ledger storages by the name a
config section's ``plugin`` key picks, metadata stores and object-store tiers by URI scheme,
ledger types by name and wire id, placement policies and auth providers by name. A name
registered twice is an error naming both plugins and distributions, never a silent
shadowing. Each storage component (and placement policy) comes with the attrs class of its
config section, so that every section is validated the same way
(:func:`bkframe.core.config.parse_section`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import attrs

from bkframe.core.config import DIRECTORY, DIRECTORY_KEY_NAMES
from bkframe.core.counters import Counters
from bkframe.core.interfaces.auth import AuthProvider
from bkframe.core.interfaces.durability import DurabilityPolicy
from bkframe.core.interfaces.placement import PlacementPolicy
from bkframe.errors import PluginError, UnknownLedgerTypeError

if TYPE_CHECKING:  # the storage protocols import trio, which a registry does not need
    from bkframe.core.interfaces.entry_log import EntryLogManager
    from bkframe.core.interfaces.journal import Journal
    from bkframe.core.interfaces.ledger_storage import LedgerStorage
    from bkframe.core.interfaces.metadata_store import MetadataStore
    from bkframe.core.interfaces.tier import Tier

C = TypeVar("C")


class ComponentKind(str, enum.Enum):
    JOURNAL = "journal"
    ENTRY_LOG_MANAGER = "entry_log_manager"
    LEDGER_STORAGE = "ledger_storage"
    METADATA_STORE = "metadata_store"
    LEDGER_TYPE = "ledger_type"
    PLACEMENT_POLICY = "placement_policy"
    AUTH_PROVIDER = "auth_provider"
    TIER = "tier"

    @property
    def by_scheme(self) -> bool:
        """Whether components of this kind are picked by URI scheme (``NAME://...``)."""
        return self in (ComponentKind.METADATA_STORE, ComponentKind.TIER)


#: The components a bookie hands a directory to: the bookie locks it and every directory
#: their config keys declare (:func:`~bkframe.core.config.directory_field`).
STORAGE_KINDS = frozenset({ComponentKind.JOURNAL, ComponentKind.ENTRY_LOG_MANAGER, ComponentKind.LEDGER_STORAGE})

#: What a :func:`~bkframe.core.config.directory_field` key may hold.
_DIRECTORY_TYPES = ("str", "Path", "tuple[str, ...]")


class PluginDefectError(PluginError):
    """What a plugin registers is wrong in itself (not a clash with another plugin): a
    third-party plugin that does it is left out and reported, as one whose import fails."""


def _check_directory_keys(config: type, component: str) -> None:
    """:class:`PluginError` unless every key of ``config`` named like a directory says whether
    the bookie locks it: a storage plugin cannot forget a directory it writes, which a second
    bookie process could then write as well (see :mod:`bkframe.storage_kit.directory_lock`)."""
    for field in attrs.fields(attrs.resolve_types(cast(Any, config))):
        type_name = getattr(field.type, "__name__", None) if isinstance(field.type, type) else str(field.type)
        if DIRECTORY in field.metadata:
            if type_name not in _DIRECTORY_TYPES:
                raise PluginDefectError(
                    f"{component}: config key {field.name} is a directory_field of type {type_name}; "
                    f"it should be one of {', '.join(_DIRECTORY_TYPES)}"
                )
        elif DIRECTORY_KEY_NAMES.search(field.name):
            raise PluginDefectError(
                f"{component}: config key {field.name} looks like a directory; declare it with "
                f"bkframe.core.config.directory_field(...) so that the bookie locks it (one process per "
                f"directory), or directory_field(..., locked=False) if the component only reads there"
            )


class MetadataStoreFactory(Protocol):
    def __call__(self, uri: str, *, create: bool) -> MetadataStore:
        """Open the store ``uri`` names. ``create=False`` (clients) must not make a new,
        empty store: raise :class:`~bkframe.errors.MetadataError` saying it does not exist.
        Bookies and the sandbox pass ``create=True``."""
        ...


class TierFactory(Protocol):
    def __call__(self, uri: str) -> Tier:
        """Open the tier ``uri`` names (its options in the URI's query). Check what can be
        checked without a round trip (the URI, a local directory); raise
        :class:`~bkframe.errors.ConfigError` for a URI that cannot work, naming the URI but
        never a secret in it."""
        ...


@attrs.frozen
class Component:
    kind: ComponentKind
    #: The name config and users pick it by (a metadata store's URI scheme, without ``://``).
    name: str
    #: Makes the part; for a ledger type, the :class:`DurabilityPolicy` itself.
    factory: Any
    #: The attrs class its config section is validated against (None: no config section).
    config: type | None
    description: str
    #: Who registered it: the plugin's name and its distribution.
    plugin: str
    distribution: str


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


class ComponentRegistry:
    """Handed to ``bkframe_register_components``; each ``add_*`` registers one component.

    Factories get the validated config object (an instance of ``config``), then the
    arguments of their kind; see each method.
    """

    def __init__(self) -> None:
        self._components: dict[tuple[ComponentKind, str], Component] = {}
        self._type_ids: dict[int, Component] = {}
        #: (plugin, distribution) registering now; set by the plugin manager.
        self._registrant = ("(unknown)", "(unknown)")

    def registering(self, plugin: str, distribution: str) -> None:
        """Attribute what is added from now on to ``plugin`` of ``distribution``."""
        self._registrant = (plugin, distribution)

    def _add(self, kind: ComponentKind, name: str, factory: Any, config: type | None, description: str) -> None:
        plugin, distribution = self._registrant
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {plugin} ({distribution}) registers a {kind.value} without a name")
        first = self._components.get((kind, name))
        if first is not None:
            raise PluginError(
                f"{kind.value} {name!r} is registered twice: by plugin {first.plugin} (distribution "
                f"{first.distribution}) and by plugin {plugin} (distribution {distribution}). Uninstall one, "
                f"or disable it with [plugins] disable = [...] or $BKFRAME_DISABLE_PLUGINS"
            )
        if kind in STORAGE_KINDS and config is not None:
            _check_directory_keys(config, f"{kind.value} {name!r} (plugin {plugin}, distribution {distribution})")
        self._components[(kind, name)] = Component(kind, name, factory, config, description, plugin, distribution)

    def add_journal(
        self, name: str, factory: Callable[[C, Path, Counters], Journal], *, config: type[C], description: str = ""
    ) -> None:
        """``factory(config, directory, counters)``: a :class:`Journal` writing in ``directory``
        (count ``journal_bytes_written`` and ``journal_fsyncs`` in ``counters``)."""
        self._add(ComponentKind.JOURNAL, name, factory, config, description)

    def add_entry_log_manager(
        self,
        name: str,
        factory: Callable[[C, Path, Counters], EntryLogManager],
        *,
        config: type[C],
        description: str = "",
    ) -> None:
        """``factory(config, directory, counters)``: an :class:`EntryLogManager` over ``directory``."""
        self._add(ComponentKind.ENTRY_LOG_MANAGER, name, factory, config, description)

    def add_ledger_storage(
        self,
        name: str,
        factory: Callable[[C, Path, EntryLogManager, Counters], LedgerStorage],
        *,
        config: type[C],
        description: str = "",
    ) -> None:
        """``factory(config, directory, entry_logs, counters)``: a :class:`LedgerStorage` keeping
        its index and state in ``directory`` (a storage that keeps entries elsewhere may
        ignore ``entry_logs``)."""
        self._add(ComponentKind.LEDGER_STORAGE, name, factory, config, description)

    def add_metadata_store(self, scheme: str, factory: MetadataStoreFactory, *, description: str = "") -> None:
        """``factory(uri, create=...)`` opens the URIs of ``scheme`` (``"zk"`` for ``zk://...``)."""
        self._add(ComponentKind.METADATA_STORE, scheme, factory, None, description)

    def add_tier(self, scheme: str, factory: TierFactory, *, description: str = "") -> None:
        """``factory(uri)`` opens the object-store tiers of ``scheme`` (``"s3"`` for
        ``s3://BUCKET/...``): a :class:`~bkframe.core.interfaces.tier.Tier`."""
        self._add(ComponentKind.TIER, scheme, factory, None, description)

    def add_ledger_type(self, policy: DurabilityPolicy) -> None:
        """A ledger type; its name and its wire ``type_id`` (0-65535) must both be unique."""
        plugin, distribution = self._registrant
        if not 0 <= policy.type_id <= 0xFFFF:
            raise PluginError(f"ledger type {policy.name} ({plugin}): wire id {policy.type_id} is not in 0..65535")
        clash = self._type_ids.get(policy.type_id)
        if clash is not None:
            raise PluginError(
                f"ledger types {clash.name} (plugin {clash.plugin}, distribution {clash.distribution}) and "
                f"{policy.name} (plugin {plugin}, distribution {distribution}) both use wire id {policy.type_id}"
            )
        self._add(ComponentKind.LEDGER_TYPE, policy.name, policy, None, policy.description)
        self._type_ids[policy.type_id] = self._components[(ComponentKind.LEDGER_TYPE, policy.name)]

    def add_placement_policy(
        self, name: str, factory: Callable[[C], PlacementPolicy], *, config: type[C], description: str = ""
    ) -> None:
        """``factory(options)``: a :class:`~bkframe.core.interfaces.placement.PlacementPolicy`; ``options``
        is an instance of ``config`` made from the client's placement options."""
        self._add(ComponentKind.PLACEMENT_POLICY, name, factory, config, description)

    def add_auth_provider(
        self, name: str, factory: Callable[[C], AuthProvider], *, config: type[C], description: str = ""
    ) -> None:
        """``factory(options)``: an :class:`~bkframe.core.interfaces.auth.AuthProvider`; ``options`` is
        an instance of ``config`` made from the bookie's ``[auth]`` keys (but ``provider``)."""
        self._add(ComponentKind.AUTH_PROVIDER, name, factory, config, description)

    # -- reading ---------------------------------------------------------------------------

    def get(self, kind: ComponentKind, name: str) -> Component | None:
        return self._components.get((kind, name))

    def names(self, kind: ComponentKind) -> list[str]:
        return sorted(name for k, name in self._components if k is kind)

    def components(self) -> list[Component]:
        """Every component, by kind then name."""
        order = list(ComponentKind)
        return sorted(self._components.values(), key=lambda c: (order.index(c.kind), c.name))

    def drop(self, plugin: str) -> None:
        """Forget what ``plugin`` registered (it failed half-way)."""
        for key in [k for k, c in self._components.items() if c.plugin == plugin]:
            del self._components[key]
        for type_id in [i for i, c in self._type_ids.items() if c.plugin == plugin]:
            del self._type_ids[type_id]

    def ledger_types(self) -> LedgerTypes:
        return LedgerTypes({c.name: c.factory for c in self.components() if c.kind is ComponentKind.LEDGER_TYPE})
