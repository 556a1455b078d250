"""The offload service: logs' closed segments moved to their tier by their settings, and
their ledgers deleted from the bookies after the deletion lag (docs/tiered-storage.md, "The
offload service").

Any number of processes may run it (``bkframe offloader``, or ``bkframe autorecovery`` --
alone or in a bookie -- with ``[offload] enabled``); they coordinate only through the
metadata store. Every ``interval_s`` a *pass* lists the logs a page at a time, and for each
log with work to do -- segments due (:class:`~bkframe.tiering.offload_policy.OffloadPolicy`),
ledgers past the deletion lag, or a ledger left by a crash -- takes the lock
``offload/<log>`` (one owner per log; it vanishes ``lock_ttl_s`` after a holder dies), and
while it holds it:

1. offloads the due segments with :func:`~bkframe.tiering.offload.offload`, which is
   resumable (an object put but not recorded is adopted, never put twice);
2. deletes the ledgers past the lag (:mod:`bkframe.tiering.offload_deletion`: unmark,
   then delete: its docstring says why that order is crash-safe), and the ledgers of
   segments already marked off the bookies that are still there (a crash between the two).

A log whose lock is held elsewhere is skipped this pass; a lock lost while held cancels the
work at once (whatever was not compare-and-set yet is redone by the next owner). After the
logs, :meth:`OffloadService.housekeeping` runs the periodic tasks that are not per log.

It runs as the cluster's own process and never needs a log's password: its client
authenticates as ``bkframe-internal`` (the cluster secret), which bookies let read any
ledger without its key, and it reads ledgers keyless, checking CRC32C digests unkeyed (as
autorecovery's copies do). A log with an HMAC digest cannot be checked so: it is skipped
(offload it by hand with its password). A tier that fails is backed off
(:class:`~bkframe.tiering.backoff.TierBackoff`) while the other tiers, and every
log's deletions, go on; logs are never written to, so their writers and hot reads never
notice. Each metadata request has a deadline (``request_timeout_s``), each tier call its own
(``tier_timeout_s``); a failure is logged and the log retried at the next pass: the service
never stops for one.

Each step of a segment's life here goes through :meth:`OffloadService.step` (``"put"``: its
object written and verified, not recorded yet; ``"recorded"``; ``"unmarked"``: marked off
the bookies, its ledger not deleted yet), which only logs it at debug level; the fault tools
kill a real process at a chosen step through it (:mod:`bkframe.testing.faults.offloader`).
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from pathlib import Path

import anyio
import trio

from bkframe.client.client import Client
from bkframe.client.context import ClientContext
from bkframe.client.entry_format import Digester
from bkframe.client.logs.model import LogMetadata, Segment
from bkframe.client.logs.records import LogRecords
from bkframe.client.read_handle import ReadHandle
from bkframe.client.settings import ClientSettings
from bkframe.common.held_lock import release_quietly, while_held
from bkframe.core.config import OffloadConfig
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import DigestType
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import BKError, ConfigError, NoSuchLogError, TierError, UnauthorizedError
from bkframe.tiering.backoff import TierBackoff
from bkframe.tiering.offload import offload
from bkframe.tiering.offload_deletion import delete_ledger, ledger_exists, unmark
from bkframe.tiering.offload_metrics import OffloadCounters
from bkframe.tiering.offload_policy import OffloadPolicy
from bkframe.tiering.sweep import sweep_tier

log = logging.getLogger("bkframe.offload")

#: Logs listed per metadata request.
LOG_PAGE = 100
#: An offload's deadline allows its segments' bytes at this rate on top of its requests'.
MIN_BYTES_PER_S = 1 << 20
#: Ledgers this process saw deleted, remembered so that a pass does not ask again.
MAX_KNOWN_DELETED = 1_000_000


def lock_name(log_name: str) -> str:
    return f"offload/{log_name}"


class OffloadService:
    """``await nursery.start(service.run)``: passes every ``interval_s`` until cancelled;
    ``await service.run_pass()`` runs one (``bkframe offloader --once``)."""

    def __init__(
        self,
        store: MetadataStore,
        plugins: PluginManager,
        config: OffloadConfig,
        *,
        holder: str,
        settings: ClientSettings | None = None,
        counters: OffloadCounters | None = None,
    ) -> None:
        """``settings``: the client's, authenticating as the cluster's own (``as_internal``)."""
        self.store = store
        self.plugins = plugins
        self.config = config
        self.holder = holder
        self.settings = settings
        self.counters = counters if counters is not None else OffloadCounters()
        self.backoff = TierBackoff(config.min_backoff_s, config.max_backoff_s)
        self.spool = Path(config.spool_dir) if config.spool_dir else Path(tempfile.gettempdir())
        self._known_deleted: set[int] = set()
        self._hmac_warned: set[str] = set()
        #: Segments due by size, by (log uid, number): when a pass first saw each due.
        self._seen_due: dict[tuple[str, int], float] = {}
        self._seen_due_now: dict[tuple[str, int], float] = {}
        self._client: Client | None = None
        self._records: LogRecords | None = None
        #: Tiers seen in the logs' settings and offloads, and when each is swept next (trio time).
        self._tiers_seen: set[str] = set(filter(None, [config.tier]))
        self._next_sweep: dict[str, float] = {}

    # -- running ------------------------------------------------------------------------------

    async def run(
        self, ctx: ClientContext | None = None, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Passes until cancelled, with ``ctx`` (autorecovery shares its own) or a client
        context of its own."""
        async with anyio.create_task_group() as nursery:
            self.attach(ctx if ctx is not None else ClientContext.create(nursery, self.store, self.plugins, self.settings))
            task_status.started()
            log.info("offload service running as %s, a pass every %g s", self.holder, self.config.interval_s)
            try:
                while True:
                    started = trio.current_time()
                    try:
                        await self.run_pass()
                    except (BKError, ConnectionError, OSError, trio.TooSlowError) as e:  # the store down, slow
                        log.warning("offload pass failed (%s); the next one starts in %g s", e or type(e).__name__,
                                    self.config.interval_s)
                    except Exception:  # a bug: logged whole, and the next pass runs
                        log.exception("offload pass failed; the next one starts in %g s", self.config.interval_s)
                    await trio.sleep_until(started + self.config.interval_s)
            finally:
                if ctx is None:
                    with trio.CancelScope(shield=True):
                        await self.client.context.tiers.aclose()

    async def run_once(self) -> None:
        """One pass with a client of its own (``bkframe offloader --once``)."""
        async with anyio.create_task_group() as nursery:
            self.attach(ClientContext.create(nursery, self.store, self.plugins, self.settings))
            try:
                await self.run_pass()
            finally:
                with trio.CancelScope(shield=True):
                    await self.client.context.tiers.aclose()
                nursery.cancel_scope.cancel()

    def attach(self, ctx: ClientContext) -> None:
        """Use ``ctx`` (a client context authenticated as the cluster's own) for the passes."""
        ctx.tiers.limiter.total_tokens = max(ctx.tiers.limiter.total_tokens, 2)
        self._client = Client(ctx)
        self._records = LogRecords(self._client)

    @property
    def client(self) -> Client:
        assert self._client is not None, "attach() or run() first"
        return self._client

    @property
    def records(self) -> LogRecords:
        assert self._records is not None, "attach() or run() first"
        return self._records

    async def run_pass(self) -> None:
        """One pass over every log, then :meth:`housekeeping`."""
        lags: dict[str, float] = {}
        self._seen_due_now = {}
        start = ""
        while True:
            with trio.fail_after(self.config.request_timeout_s):
                names = await self.store.list_logs(start=start, limit=LOG_PAGE)
            for name in names:
                try:
                    await self.serve_log(name, lags)
                except Exception as e:  # one log never stops the pass; the next pass retries it
                    self.counters.log_errors += 1
                    if isinstance(e, (BKError, ConnectionError, OSError, trio.TooSlowError)):
                        log.warning("log %r: offload work not done this pass: %s", name, e or type(e).__name__)
                    else:
                        log.exception("log %r: offload work failed; retrying at the next pass", name)
            if len(names) < LOG_PAGE:
                break
            start = names[-1] + "\0"
        self.counters.lag_s = lags
        self._seen_due = self._seen_due_now
        self.counters.passes += 1
        await self.housekeeping()

    async def housekeeping(self) -> None:
        """Periodic tasks that are not per log, after each pass: each must never raise for a
        failure it can retry next time. The orphan sweep of each tier this service has seen
        (a log's own or the default tier, or one an offloaded segment names), every
        ``sweep_interval_s``, by one service at a time (the lock ``offload-sweep/<tier>``)."""
        interval = self.config.sweep_interval_s
        if not interval:
            return
        for tier in sorted(self._tiers_seen):
            now = trio.current_time()
            if self._next_sweep.get(tier, now) > now or not self.backoff.usable(tier, now):
                continue
            self._next_sweep[tier] = now + interval
            try:
                await self._sweep(tier)
            except (BKError, ConnectionError, OSError, trio.TooSlowError) as e:
                log.warning("tier %s: orphan sweep not done (%s); the next in %g s", tier, e or type(e).__name__, interval)
            except Exception:  # a bug: logged whole; the pass goes on
                log.exception("tier %s: orphan sweep failed; the next in %g s", tier, interval)

    async def _sweep(self, tier: str) -> None:
        name = "offload-sweep/" + hashlib.sha256(tier.encode()).hexdigest()[:24]
        with trio.fail_after(self.config.request_timeout_s):
            lock = await self.store.try_lock(name, self.holder, self.config.lock_ttl_s, self.client.context.nursery)
        if lock is None:
            return  # another service sweeps it now
        try:
            summary = await sweep_tier(self.client, tier, grace_s=self.config.orphan_grace_s)
        finally:
            await release_quietly(lock, self.config.request_timeout_s, log, f"the sweep lock of tier {tier}")
        self.counters.orphans_deleted += summary.deleted
        if summary.orphans or summary.at_risk:
            log.warning(
                "tier %s: orphan sweep: %d object(s) no log names, %d deleted (%d bytes), %d younger than the grace; "
                "%d recorded object(s) missing or of the wrong size, %d of them at risk (bkframe tier check)",
                tier, summary.orphans, summary.deleted, summary.deleted_bytes, summary.young, summary.missing,
                summary.at_risk,
            )

    # -- one log ------------------------------------------------------------------------------

    async def serve_log(self, name: str, lags: dict[str, float]) -> None:
        """Take the log's lock if it has work, and do it while holding it."""
        try:
            record, segments = await self._read(name)
        except NoSuchLogError:
            return  # deleted since it was listed
        policy = self._policy(record)
        self._tiers_seen.update(filter(None, [policy.tier, *(s.offload.tier for s in segments if s.offload)]))
        now = time.time()
        due = policy.due(segments, now) if policy.tier is not None and self._checkable(record) else {}
        # Due by size: since when this process first saw it due (nothing records it).
        since = {n: t if t is not None else self._seen_due.get((record.uid, n), now) for n, t in due.items()}
        self._seen_due_now.update({(record.uid, n): t for n, t in since.items() if due[n] is None})
        done: set[int] = set()
        try:
            await self._serve_held(name, record, policy, due, segments, done)
        finally:
            if policy.tier is not None and due:
                left = [t for n, t in since.items() if n not in done]
                lags[policy.tier] = max(lags.get(policy.tier, 0.0), now - min(left) if left else 0.0)

    async def _serve_held(
        self, name: str, record: LogMetadata, policy: OffloadPolicy, due: dict[int, float | None],
        segments: list[Segment], done: set[int],
    ) -> None:
        now = time.time()
        offloading = bool(due) and policy.tier is not None and self.backoff.usable(policy.tier, trio.current_time())
        if not offloading and not policy.deletable(segments, now) and not self._left_behind(segments):
            return
        with trio.fail_after(self.config.request_timeout_s):
            lock = await self.store.try_lock(lock_name(name), self.holder, self.config.lock_ttl_s, self.client.context.nursery)
        if lock is None:
            log.debug("log %r: another offloader holds it", name)
            return
        try:
            await while_held(
                lock, lambda: self._work(name, record, policy, due if offloading else {}, segments, done), log,
                f"log {name!r}: lost its offload lock; abandoning its work this pass",
            )
        finally:
            await release_quietly(lock, self.config.request_timeout_s, log, f"the offload lock of log {name!r}")

    async def _work(
        self, name: str, record: LogMetadata, policy: OffloadPolicy, due: dict[int, float | None],
        segments: list[Segment], done: set[int],
    ) -> None:
        if due and policy.tier is not None:
            await self._offload(name, policy.tier, due, segments, done)
            record, segments = await self._read(name)
        now = time.time()
        for seg in policy.deletable(segments, now):
            with trio.fail_after(self.config.request_timeout_s):
                stored = await unmark(self.records, name, record.uid, seg)
            if stored is None or stored.offload is None or stored.offload.on_bookies:
                continue  # left the log meanwhile
            self.step("unmarked", stored)
            await self._delete(name, seg)
        for seg in self._left_behind(segments):
            with trio.fail_after(self.config.request_timeout_s):
                there = await ledger_exists(self.client, seg.ledger_id)
            if there:
                log.info("log %r: segment %d is marked off the bookies but its ledger %d is there; deleting it",
                         name, seg.number, seg.ledger_id)
                await self._delete(name, seg)
            else:
                self._remember_deleted(seg.ledger_id)

    async def _offload(
        self, name: str, tier: str, due: dict[int, float | None], segments: list[Segment], done: set[int]
    ) -> None:
        """Offload the due segments; ``done`` gets those recorded (or gone from the log)."""
        size = sum(s.length for s in segments if s.number in due)
        deadline = self.config.request_timeout_s * (2 + len(due)) + size / MIN_BYTES_PER_S
        try:
            with trio.fail_after(self.config.tier_timeout_s):
                target = await self.client.context.tiers.get(tier)
            target.timeout_s = self.config.tier_timeout_s
            with trio.fail_after(deadline):
                result = await offload(
                    self.records, self.client.context.tiers, name, password=b"", tier=tier, spool_dir=self.spool,
                    open_ledger=self._open_keyless, only=set(due), step=self.step,
                )
        except (TierError, ConfigError, trio.TooSlowError) as e:
            # ConfigError: a URI no installed plugin serves -- an operator's fix, retried as a failure.
            self.counters.failures[tier] += 1
            self.backoff.failed(tier, e, trio.current_time())
            return
        self.backoff.succeeded(tier, trio.current_time())
        for seg in result.offloaded:
            assert seg.offload is not None
            self.counters.segments[tier] += 1
            self.counters.object_bytes[tier] += seg.offload.size
            self.counters.segment_bytes[tier] += seg.length
            log.info("log %r: segment %d offloaded to %s as %s (%d bytes)", name, seg.number, tier, seg.offload.key,
                     seg.offload.size)
        done.update(s.number for s in result.offloaded)
        done.update(result.skipped)

    async def _delete(self, name: str, seg: Segment) -> None:
        with trio.fail_after(self.config.request_timeout_s):
            deleted = await delete_ledger(self.client, seg.ledger_id)
        self._remember_deleted(seg.ledger_id)
        if deleted:
            self.counters.ledgers_deleted += 1
            log.info("log %r: segment %d's ledger %d deleted from the bookies (its object stays in %s)", name,
                     seg.number, seg.ledger_id, seg.offload.tier if seg.offload else "its tier")

    # -- helpers -------------------------------------------------------------------------------

    async def _read(self, name: str) -> tuple[LogMetadata, list[Segment]]:
        with trio.fail_after(self.config.request_timeout_s):
            record = await self.records.read(name)
            return record, await self.records.segments(record)

    def _policy(self, record: LogMetadata) -> OffloadPolicy:
        c = self.config
        return OffloadPolicy.of(
            record.settings, tier=c.tier, after_s=c.after_s, beyond_bytes=c.beyond_bytes, deletion_lag_s=c.deletion_lag_s
        )

    def _checkable(self, record: LogMetadata) -> bool:
        """Its digests can be checked without its password (CRC32C, not an HMAC)."""
        if record.settings.digest == DigestType.CRC32C:
            return True
        if record.name not in self._hmac_warned:
            self._hmac_warned.add(record.name)
            log.warning("log %r has %s digests, which cannot be checked without its password: the offload service "
                        "leaves it alone (offload it by hand: bkframe log offload)", record.name, record.settings.digest.value)
        return False

    def _left_behind(self, segments: list[Segment]) -> list[Segment]:
        """Segments marked off the bookies whose ledger this process has not seen gone."""
        return [
            s for s in segments
            if s.offload is not None and not s.offload.on_bookies and s.ledger_id not in self._known_deleted
        ]

    def _remember_deleted(self, ledger_id: int) -> None:
        if len(self._known_deleted) >= MAX_KNOWN_DELETED:
            self._known_deleted.clear()  # asked again, once each: bounded memory
        self._known_deleted.add(ledger_id)

    async def _open_keyless(self, ledger_id: int) -> ReadHandle:
        """The ledger opened without its password: the bookies serve the cluster's own
        client keyless, and CRC32C digests are checked unkeyed."""
        with trio.fail_after(self.config.request_timeout_s):
            md = await self.client.ledger_metadata(ledger_id)
        if md.digest_type != DigestType.CRC32C:  # a ledger committed to the log with a digest of its own
            raise UnauthorizedError(
                f"ledger {ledger_id} has {md.digest_type.value} digests, which cannot be checked without the log's "
                "password: offload this log by hand (bkframe log offload)"
            )
        return ReadHandle(self.client.context, md, b"", Digester.unkeyed(md.digest_type))

    def step(self, step: str, seg: Segment) -> None:
        """A segment reached ``step`` (``put``, ``recorded``, ``unmarked``)."""
        log.debug("segment %d: %s", seg.number, step)
