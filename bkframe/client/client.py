"""The async client (asyncio or trio, on anyio): create, open (with recovery), delete and list ledgers.

::

    async with bkframe.open_client("sqlite:///tmp/meta.db") as bk:
        writer = await bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
        await writer.append(b"hello")
        await writer.close()
        reader = await bk.open_ledger(writer.ledger_id, password=b"pw")
        entries = await reader.read(0, reader.lac)
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from bkframe.client.context import ClientContext
from bkframe.client.entry_format import Digester
from bkframe.client.ledger_ids import LedgerIds
from bkframe.client.logs.api import Logs
from bkframe.client.placement import choose_ensemble
from bkframe.client.read_handle import ReadHandle
from bkframe.client.recovery import Recovery
from bkframe.client.settings import ClientSettings
from bkframe.client.write_handle import WriteHandle
from bkframe.common.cluster_record import require_cluster
from bkframe.core.ledger_keys import master_key, password_hash
from bkframe.core.metadata import ClusterRecord, DigestType, LedgerMetadata, LedgerStateName
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import (
    BadVersionError,
    BKError,
    ConfigError,
    LedgerClosedError,
    LedgerExistsError,
    LedgerFencedError,
    UnauthorizedError,
    UnsupportedError,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger("bkframe.client")
#: How long a closing client tries to store its log cursors' pending acks.
CLOSE_FLUSH_TIMEOUT_S = 10.0


class Client:
    """Use :func:`open_client`; the client lives for the ``async with`` block.

    Its handles and recoveries share its :class:`~bkframe.client.context.ClientContext`.
    """

    settings: ClientSettings
    client_id: str
    logs: Logs

    def __init__(self, context: ClientContext, metrics_registry: CollectorRegistry | None = None) -> None:
        self.context = context
        self.metadata = context.metadata
        self.pool = context.pool
        self.settings = context.settings
        self.client_id = context.client_id
        self._registry = None if metrics_registry is None else self._registered(metrics_registry)
        #: Named logs on this client (see :class:`~bkframe.client.logs.api.Logs`).
        self.logs = Logs(self)
        #: The store's cluster record, read at the first create (a store that is no cluster
        #: is a clear error there, not "no bookies").
        self._cluster: ClusterRecord | None = None
        #: New ledgers' ids, taken from the store in blocks.
        self._ledger_ids = LedgerIds(self.metadata, self.settings.ledger_id_block)

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """The Prometheus registry with this client's metrics (add latency, ensemble changes,
        recoveries): the one given to :func:`open_client`, else one of its own, made here."""
        if self._registry is None:
            self._registry = self._registered(None)
        return self._registry

    def _registered(self, registry: CollectorRegistry | None) -> CollectorRegistry:
        # Imported at first use: most processes that import bkframe never read a client's
        # metrics (prometheus_client alone is ~0.08 CPU-s to import).
        from bkframe.client.metrics import client_registry
        from bkframe.subscriptions.metrics import SubscriptionCollector

        registry = client_registry(self.context.counters, self.client_id, registry)
        registry.register(SubscriptionCollector(lambda: self.logs.owned_subscriptions()))
        return registry

    async def create_ledger(
        self,
        *,
        ensemble: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        ledger_type: str = "PD_JOURNAL",
        digest: DigestType | str = DigestType.CRC32C,
        password: bytes = b"",
        custom: Mapping[str, str] | None = None,
        claim: bool = True,
    ) -> WriteHandle:
        """Create a ledger and return its writer. ``claim=False`` leaves the ledger for
        another process to claim with :meth:`open_writer` (the CLI's create/append)."""
        policy = self.context.ledger_types.named(ledger_type)  # unknown type: a clear error before anything is stored
        if self._cluster is None:
            self._cluster = await require_cluster(self.metadata)
        if policy.lac_by_sync and ensemble > write_quorum:
            raise UnsupportedError(
                f"{ledger_type} ledgers cannot be striped (E={ensemble} > W={write_quorum}): the LastAddSynced "
                f"rule needs every bookie to hold every entry; use E = W"
            )
        chosen = await choose_ensemble(self.pool, ensemble, write_quorum=write_quorum)
        while True:
            ledger_id = await self._ledger_ids.next()
            md = LedgerMetadata(
                ledger_id=ledger_id,
                ensemble_size=ensemble,
                write_quorum=write_quorum,
                ack_quorum=ack_quorum,
                fragments=((0, tuple(chosen)),),
                ledger_type=ledger_type,
                digest_type=DigestType(digest),
                password_hash=password_hash(password),
                custom=dict(custom or {}),
                writer=self.client_id if claim else "",
            )
            try:
                md = await self.metadata.create_ledger(md)
                break
            except LedgerExistsError:
                continue
        return WriteHandle(self.context, md, master_key(password), Digester.for_ledger(md.digest_type, password))

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return await self.metadata.read_ledger(ledger_id)

    async def open_ledger(self, ledger_id: int, *, password: bytes = b"", recovery: bool = True) -> ReadHandle:
        """Open for reading. With ``recovery`` an unclosed ledger is fenced, its end found and
        it is closed (the old writer's next add fails); without, it is read as it is."""
        md = await self.ledger_metadata(ledger_id)
        if md.password_hash != password_hash(password):
            raise UnauthorizedError(f"wrong password for ledger {ledger_id}")
        key = master_key(password)
        digester = Digester.for_ledger(md.digest_type, password)
        if recovery and not md.closed:
            md = await Recovery(self.context, md, key, digester).run()
        handle = ReadHandle(self.context, md, key, digester)
        if not md.closed:
            await handle.read_lac()  # as BookKeeper's open: the reader knows its LAC at once
        return handle

    async def open_writer(self, ledger_id: int, *, password: bytes = b"") -> WriteHandle:
        """Claim an unclaimed, empty, open ledger (made with ``claim=False``) for writing."""
        md = await self.ledger_metadata(ledger_id)
        if md.password_hash != password_hash(password):
            raise UnauthorizedError(f"wrong password for ledger {ledger_id}")
        while True:
            if md.state != LedgerStateName.OPEN:
                raise LedgerClosedError(f"ledger {ledger_id} is {md.state.value}; it takes no more entries")
            if md.writer:
                raise LedgerFencedError(
                    f"ledger {ledger_id} already has a writer (ledgers have a single writer); create a new ledger"
                )
            try:
                md = await self.metadata.update_ledger(attrs.evolve(md, writer=self.client_id), md.version)
                break
            except BadVersionError:
                md = await self.ledger_metadata(ledger_id)
        for bookie_id in md.fragments[-1][1]:
            try:
                await self.pool.get(bookie_id)
            except ConnectionError:
                pass  # the first append finds it down and changes the ensemble
        return WriteHandle(self.context, md, master_key(password), Digester.for_ledger(md.digest_type, password))

    async def delete_ledger(self, ledger_id: int) -> None:
        await self.metadata.delete_ledger(ledger_id)

    async def list_ledgers(self, *, start: int = 0, limit: int | None = None) -> list[int]:
        """Ledger ids ``>= start``, ascending, at most ``limit`` (every one if None: a large
        cluster is better paged, as :func:`bkframe.core.interfaces.metadata_store.iter_ledger_ids` does)."""
        return await self.metadata.list_ledgers(start=start, limit=limit)


async def _flush_cursors(client: Client) -> None:
    """Store the log cursor acks not stored yet, and give up the subscriptions this client
    owns, as the client closes (bounded, and never hiding the block's own error: a failure is
    logged, those entries come again; a subscription not given up is taken over once its lock
    expires)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_FLUSH_TIMEOUT_S):
        try:
            await client.logs.flush_cursors()
        except BKError as e:
            log.warning("storing log cursors at close failed (their consumers see those entries again): %s", e)
        try:
            await client.logs.close_subscriptions()
        except BKError as e:
            log.warning("giving up subscriptions at close failed (taken over once their locks expire): %s", e)


@asynccontextmanager
async def open_client(
    metadata_uri: str,
    *,
    plugins: PluginManager | None = None,
    settings: ClientSettings | None = None,
    metrics_registry: CollectorRegistry | None = None,
    **overrides: Any,
) -> AsyncIterator[Client]:
    """A client for the block. Keywords override :class:`ClientSettings` fields, e.g.
    ``open_client(uri, add_timeout_s=2.0, explicit_lac_interval_s=0.5)``; the others are
    options of the placement policy: ``open_client(uri, placement="rack_aware", min_racks=2)``.
    ``metrics_registry``: a Prometheus registry to put the client's metrics on (no global one
    is used; :attr:`Client.metrics_registry` makes one otherwise)."""
    settings = settings if settings is not None else ClientSettings()
    fields = {f.name for f in attrs.fields(ClientSettings)}
    options = {k: v for k, v in overrides.items() if k not in fields}
    if options:
        overrides = {k: v for k, v in overrides.items() if k in fields}
        overrides["placement_options"] = {**settings.placement_options, **options}
    try:
        settings = attrs.evolve(settings, **overrides)
    except TypeError as e:
        raise TypeError(f"open_client: {e}; the settings are: {', '.join(sorted(fields))}") from None
    plugins = plugins or PluginManager()
    try:
        placement = plugins.placement_policy(settings.placement, settings.placement_options, source="open_client")
    except ConfigError as e:
        if options:
            e.args = (f"{e}; or a setting: {', '.join(sorted(fields))}",)
        raise
    store = plugins.metadata_store(metadata_uri)
    try:
        async with anyio.create_task_group() as nursery:
            client = Client(ClientContext.create(nursery, store, plugins, settings, placement), metrics_registry)
            try:
                yield client
            finally:
                await _flush_cursors(client)
                with anyio.CancelScope(shield=True):
                    await client.context.tiers.aclose()
                nursery.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()
