"""What write handles, read handles and recovery need of a client -- and nothing more.

A :class:`ClientContext` is made once per client (:func:`bkframe.open_client`) and shared;
the handles never see the :class:`~bkframe.client.client.Client` itself, so the
client module imports the handles and nothing imports it back.
"""

from __future__ import annotations

import uuid

import anyio
import attrs

from bkframe.client.bookies.health import BookieHealth
from bkframe.client.bookies.pool import BookiePool
from bkframe.client.settings import ClientSettings
from bkframe.core.counters import ClientCounters
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.interfaces.placement import PlacementPolicy
from bkframe.core.plugin_manager import LedgerTypes, PluginManager
from bkframe.tiering.open_tiers import OpenTiers


@attrs.frozen
class ClientContext:
    #: Where the client's background tasks run (flushes, ensemble changes, explicit LACs).
    nursery: anyio.abc.TaskGroup
    metadata: MetadataStore
    #: Connections to bookies, with their health (quarantine).
    pool: BookiePool
    #: The ledger types the client's plugins registered.
    ledger_types: LedgerTypes
    settings: ClientSettings
    #: Written into the metadata of the ledgers this client claims (single writer).
    client_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    #: What the client has done (add latency, ensemble changes, recoveries), for its metrics.
    counters: ClientCounters = attrs.field(factory=ClientCounters)
    #: The object-store tiers this client opened (offloaded log segments), by URI.
    tiers: OpenTiers = attrs.field(factory=lambda: OpenTiers(lambda uri: PluginManager().tier(uri)))

    @classmethod
    def create(
        cls,
        nursery: anyio.abc.TaskGroup,
        metadata: MetadataStore,
        plugins: PluginManager,
        settings: ClientSettings | None = None,
        placement: PlacementPolicy | None = None,
    ) -> ClientContext:
        """``placement``: the policy the settings name, if the caller made it already
        (:func:`bkframe.open_client` does, so that a wrong name fails before anything starts)."""
        settings = settings if settings is not None else ClientSettings()
        if placement is None:
            placement = plugins.placement_policy(settings.placement, settings.placement_options, source="client settings")
        counters = ClientCounters()

        def tried_again() -> None:
            counters.tries_again += 1

        pool = BookiePool(
            nursery,
            metadata,
            connect_timeout_s=settings.connect_timeout_s,
            asyncio_transport=settings.asyncio_transport,
            health=BookieHealth(settings.bookie_quarantine_s),
            placement=placement,
            ssl_context=settings.ssl_context(),
            auth=settings.auth,
            bookie_set_max_age_s=settings.bookie_set_max_age_s,
            try_again_s=settings.try_again_timeout_s,
            on_try_again=tried_again,
        )
        return cls(
            nursery=nursery,
            metadata=metadata,
            pool=pool,
            ledger_types=plugins.ledger_types(),
            settings=settings,
            counters=counters,
            tiers=OpenTiers(plugins.tier, timeout_s=settings.tier_timeout_s),
        )
