"""The hook specifications: every way a plugin can extend bkframe.

One marker, one prefix (``bkframe_*``). Plugins implement hooks with ``@bkframe.hookimpl``.
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
        ``PluginManager.tier(uri)``) and ``add_ledger_type(policy)`` (a
        :class:`~bkframe.core.interfaces.durability.DurabilityPolicy`).
    :return: nothing. A name (or ledger-type wire id) registered twice is a
        :class:`~bkframe.errors.PluginError` naming both plugins and distributions.

    Called once per plugin manager, for every plugin (not firstresult), built-ins first.
    """


@hookspec
def bkframe_placement_policy(registry: ComponentRegistry) -> None:
    """Register placement policies: ``registry.add_placement_policy(name, factory, config=C)``.

    :param registry: the same :class:`~bkframe.core.registry.ComponentRegistry` as
        :func:`bkframe_register_components` gets. ``factory(options: C)`` returns a
        :class:`~bkframe.core.interfaces.placement.PlacementPolicy`; ``C`` is the attrs class the
        policy's options (``[placement]`` keys, ``open_client`` keywords) are validated
        against. A client picks a policy by name (``placement = "rack_aware"``).
    :return: nothing. A name registered twice is a :class:`~bkframe.errors.PluginError`
        naming both plugins and distributions.

    Called once per plugin manager, for every plugin (not firstresult), built-ins first,
    after every ``bkframe_register_components``.
    """


@hookspec
def bkframe_auth_provider(registry: ComponentRegistry) -> None:
    """Register authentication providers: ``registry.add_auth_provider(name, factory, config=C)``.

    :param registry: the same :class:`~bkframe.core.registry.ComponentRegistry` as
        :func:`bkframe_register_components` gets. ``factory(options: C)`` returns an
        :class:`~bkframe.core.interfaces.auth.AuthProvider`; ``C`` is the attrs class the bookie's
        ``[auth]`` keys (all but ``provider``) are validated against. A bookie picks a
        provider by name (``[auth] provider = "token"``); built-ins: ``none``, ``token``, ``tls``.
    :return: nothing. A name registered twice is a :class:`~bkframe.errors.PluginError`
        naming both plugins and distributions.

    Called once per plugin manager, for every plugin (not firstresult), built-ins first,
    after every ``bkframe_placement_policy``.
    """
