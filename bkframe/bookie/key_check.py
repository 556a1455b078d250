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
"""

from __future__ import annotations

import enum
from collections import OrderedDict

import attrs
import trio

from bkframe.core.ledger_keys import key_matches
from bkframe.core.metadata import MetadataError, MetadataStore, NoSuchLedgerError

#: Key hashes kept (one per ledger: about 100 bytes each).
CACHE_SIZE = 100_000
#: Metadata reads in flight at once; more checks wait.
CONCURRENT_READS = 16
#: How long one check waits for the metadata store (then the request is answered with an
#: error the client retries, and nothing is created).
TIMEOUT_S = 10.0


class Verdict(enum.Enum):
    MATCH = "match"
    WRONG_KEY = "wrong key"
    NO_LEDGER = "no ledger"


@attrs.define
class _Read:
    """A metadata read in flight, shared by the checks that wait for it."""

    done: trio.Event = attrs.Factory(trio.Event)
    #: The ledger's key hash; None when it does not exist (or the read failed: ``error``).
    hash: str | None = None
    error: Exception | None = None


class KeyCheck:
    """One bookie's key checks against its metadata store (see the module docstring)."""

    def __init__(self, store: MetadataStore, *, cache_size: int = CACHE_SIZE) -> None:
        self._store = store
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

    async def check(self, ledger_id: int, key: bytes) -> Verdict:
        """The verdict, reading the ledger's metadata if need be. Raises (a
        :class:`~bkframe.errors.MetadataError`, ``trio.TooSlowError``) when the store cannot say."""
        known = self.cached(ledger_id, key)
        if known is not None:
            return known
        stored = await self._read(ledger_id)
        if stored is None:
            return Verdict.NO_LEDGER
        return Verdict.MATCH if key_matches(key, stored) else Verdict.WRONG_KEY

    async def _read(self, ledger_id: int) -> str | None:
        shared = self._reading.get(ledger_id)
        if shared is not None:
            await shared.done.wait()
            if shared.error is not None:
                raise shared.error
            return shared.hash
        read = self._reading[ledger_id] = _Read()
        try:
            async with self._limiter:
                with trio.fail_after(TIMEOUT_S):
                    md = await self._store.read_ledger(ledger_id)
            read.hash = md.password_hash
            self._remember(ledger_id, md.password_hash)
        except NoSuchLedgerError:
            pass
        except BaseException as e:
            # Never "no such ledger" to those waiting: the store did not say.
            read.error = e if isinstance(e, Exception) else MetadataError(f"the read of ledger {ledger_id} was cancelled")
            raise
        finally:
            del self._reading[ledger_id]
            read.done.set()
        return read.hash

    def _remember(self, ledger_id: int, stored: str) -> None:
        self._hashes[ledger_id] = stored
        self._hashes.move_to_end(ledger_id)
        while len(self._hashes) > self._cache_size:
            self._hashes.popitem(last=False)
