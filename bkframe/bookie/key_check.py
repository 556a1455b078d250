"""Whether the metadata store vouches for a master key of a ledger this bookie holds no key for.

A bookie takes the first ADD or fencing READ of a ledger it does not hold -- and a key for a
ledger it holds without one (after a lost disk, a keyless copy, a keyless fence) -- only when
the ledger exists in the metadata store and the key matches its ``password_hash``: otherwise
anyone could make it create a ledger that does not exist yet, fenced with an arbitrary key,
and the next ``create_ledger`` would get that id and fail every append.

:class:`KeyCheck` reads a ledger's metadata once and keeps its key hash (bounded, least
recently used first out): a ledger's password never changes and ledger ids are never given
out twice, so what it keeps stays true. Concurrent checks of one ledger share one read (a
writer's pipelined first adds), and at most :data:`CONCURRENT_READS` reads run at once. A
ledger the store does not know is not remembered (it may be created next). The check runs
only for ledgers the bookie does not hold with a key: never on the path of a ledger it
serves already.

A slow store must not look like a dead bookie. The read runs in the bookie's background
(``nursery``), not in the request that started it, and a request waits for it at most
``wait_s`` (``[bookie] key_check_wait_s``, 1 s): then :class:`KeyCheckPending` says "not
decided yet", and the client that understands it (FEATURES TRY_AGAIN) is answered TRY_AGAIN
and sends the same request again, to find the verdict cached once the store answers. A
client's add timeout is counted per answer, so a store failing over (an etcd client's 5 s on
a cut member) no longer reads as this bookie timing out. Clients that never said they
understand TRY_AGAIN wait as before, up to :data:`TIMEOUT_S`.
"""

from __future__ import annotations

import enum
from collections import OrderedDict

import attrs
import trio

from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.ledger_keys import key_matches
from bkframe.errors import MetadataError, NoSuchLedgerError

#: Key hashes kept (one per ledger: about 100 bytes each).
CACHE_SIZE = 100_000
#: Metadata reads in flight at once; more checks wait.
CONCURRENT_READS = 16
#: Reads started and not done (in flight or waiting for one of those 16): a read outlives
#: the request that started it, so a flood of unknown ledger ids meets this cap (then
#: MetadataError: IO_ERROR, retry) rather than queueing background reads without end.
MAX_PENDING_READS = 4096
#: How long one check waits for the metadata store (then the request is answered with an
#: error the client retries, and nothing is created).
TIMEOUT_S = 10.0
#: How long a request of a client that understands TRY_AGAIN waits for a check
#: (``[bookie] key_check_wait_s``): below any sane add timeout.
WAIT_S = 1.0


class KeyCheckPending(MetadataError):
    """The store has not answered within the wait; the read goes on in the background."""


class Verdict(enum.Enum):
    MATCH = "match"
    WRONG_KEY = "wrong key"
    NO_LEDGER = "no ledger"


@attrs.define
class _Read:
    """A metadata read in flight, shared by the checks that wait for it."""

    #: When it started (trio clock): every check waits at most TIMEOUT_S from here.
    started: float
    done: trio.Event = attrs.Factory(trio.Event)
    #: The ledger's key hash; None when it does not exist (or the read failed: ``error``).
    hash: str | None = None
    error: Exception | None = None


class KeyCheck:
    """One bookie's key checks against its metadata store (see the module docstring).

    :param nursery: where reads run, so that they outlive the request that started them
        (the bookie's background); None runs each read in the check that starts it, which
        then waits for it whatever ``wait_s`` says.
    :param wait_s: how long :meth:`check` waits by default before :class:`KeyCheckPending`.
    """

    def __init__(
        self,
        store: MetadataStore,
        *,
        nursery: trio.Nursery | None = None,
        wait_s: float = WAIT_S,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self._store = store
        self._nursery = nursery
        self.wait_s = wait_s
        self._hashes: OrderedDict[int, str] = OrderedDict()
        self._cache_size = cache_size
        self._reading: dict[int, _Read] = {}
        self._limiter = trio.CapacityLimiter(CONCURRENT_READS)

    def cached(self, ledger_id: int, key: bytes) -> Verdict | None:
        """The verdict if the ledger's key hash is known here, without waiting; else None."""
        stored = self._hashes.get(ledger_id)
        if stored is None:
            return None
        self._hashes.move_to_end(ledger_id)
        return Verdict.MATCH if key_matches(key, stored) else Verdict.WRONG_KEY

    async def check(self, ledger_id: int, key: bytes, *, wait_s: float | None = None) -> Verdict:
        """The verdict, reading the ledger's metadata if need be. Raises
        :class:`KeyCheckPending` when the read is not done within ``wait_s`` (default:
        :attr:`wait_s`; the read goes on), a :class:`~bkframe.errors.MetadataError` when the
        store failed or took more than :data:`TIMEOUT_S`."""
        known = self.cached(ledger_id, key)
        if known is not None:
            return known
        stored = await self._read(ledger_id, self.wait_s if wait_s is None else wait_s)
        if stored is None:
            return Verdict.NO_LEDGER
        return Verdict.MATCH if key_matches(key, stored) else Verdict.WRONG_KEY

    async def _read(self, ledger_id: int, wait_s: float) -> str | None:
        read = self._reading.get(ledger_id)
        if read is None:
            if len(self._reading) >= MAX_PENDING_READS:
                raise MetadataError(f"{MAX_PENDING_READS} key checks are waiting for the metadata store already")
            read = self._reading[ledger_id] = _Read(trio.current_time())
            if self._nursery is None:
                await self._fetch(ledger_id, read)
            else:
                self._nursery.start_soon(self._fetch, ledger_id, read)
        # A blocking store call may not stop at TIMEOUT_S (a thread is not cancelled): the
        # waiters do.
        timeout_at = read.started + TIMEOUT_S
        with trio.move_on_at(min(trio.current_time() + wait_s, timeout_at)):
            await read.done.wait()
        if not read.done.is_set():
            if trio.current_time() >= timeout_at:
                raise MetadataError(f"the metadata store did not answer the read of ledger {ledger_id} in {TIMEOUT_S:g} s")
            raise KeyCheckPending(f"the metadata store has not answered the read of ledger {ledger_id} yet")
        if read.error is not None:
            raise read.error
        return read.hash

    async def _fetch(self, ledger_id: int, read: _Read) -> None:
        try:
            async with self._limiter:
                with trio.fail_after(TIMEOUT_S):
                    md = await self._store.read_ledger(ledger_id)
            read.hash = md.password_hash
            self._remember(ledger_id, md.password_hash)
        except NoSuchLedgerError:
            pass
        except Exception as e:  # noqa: BLE001 - handed to every waiter: the store did not say
            read.error = e
        except BaseException:
            # Never "no such ledger" to those waiting: the store did not say.
            read.error = MetadataError(f"the read of ledger {ledger_id} was cancelled")
            raise
        finally:
            if self._reading.get(ledger_id) is read:
                del self._reading[ledger_id]
            read.done.set()

    def _remember(self, ledger_id: int, stored: str) -> None:
        self._hashes[ledger_id] = stored
        self._hashes.move_to_end(ledger_id)
        while len(self._hashes) > self._cache_size:
            self._hashes.popitem(last=False)
