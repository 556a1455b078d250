"""The hook specification: the one way a plugin extends bkframe -- it registers components.

One marker, one hook, as pluggy's own hosts keep it small (tox's ``tox_register_*``).
Plugins implement it with ``@bkframe.hookimpl``.
Every hook here is documented in ``docs/plugins.md`` and tested;
``tests/core/test_hookspecs.py`` fails if one is not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from bkframe.core.registry import ComponentRegistry

PROJECT = "bkframe"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def bkframe_register_components(registry: ComponentRegistry) -> None:
    """Register this plugin's components by calling ``registry.add_*`` (tox-style).

    :param registry: a :class:`~bkframe.core.registry.ComponentRegistry`:
        ``add_journal(name, factory, config=ConfigClass)``, ``add_entry_log_manager(...)``,
        ``add_ledger_storage(...)`` (picked by the ``plugin`` key of their config section,
        which is validated against ``ConfigClass``, an attrs class, before ``factory`` gets
        it), ``add_metadata_store(scheme, factory)`` (picked by URI scheme),
        ``add_tier(scheme, factory)`` (an object-store tier, picked by URI scheme:
        ``factory(uri)`` returns a blocking :class:`~bkframe.core.interfaces.tier.Tier`; opened with
        ``PluginManager.tier(uri)``), ``add_ledger_type(policy)`` (a
        :class:`~bkframe.core.interfaces.durability.DurabilityPolicy`),
        ``add_placement_policy(name, factory, config=C)`` (picked by the client's
        ``placement`` setting; ``factory(options: C)`` returns a
        :class:`~bkframe.core.interfaces.placement.PlacementPolicy`) and
        ``add_auth_provider(name, factory, config=C)`` (picked by a bookie's ``[auth]
        provider``; ``factory(options: C)`` returns an
        :class:`~bkframe.core.interfaces.auth.AuthProvider`).
    :return: nothing. A name (or ledger-type wire id) registered twice is a
        :class:`~bkframe.errors.PluginError` naming both plugins and distributions.

    Called once per plugin manager, for every plugin (not firstresult), built-ins first.
    """
