"""The etcd store's ledgers: metadata, an index by bookie, ids in blocks.

Keys under ROOT::

    ROOT/ledgers/L<id, 19 digits>                 metadata (JSON); the key's ``version`` is the CAS version
    ROOT/bookieledgers/<bookie id>/L<id, 19 digits>   empty: the ledger names the bookie
    ROOT/idgen                                    the last ledger id handed out (decimal)

Ids are zero-padded so that keys sort as the ids do: a page of ids is a keys-only range
from the key of ``start`` with a limit, asked in windows of ids (etcd counts every key of
a range it is asked, whatever the limit: :mod:`bkframe_metadata_etcd.kv`). Each create, update
and delete is one transaction with its index keys; an update or delete reads the stored
metadata first and compares its ``mod_revision`` in the transaction, so the index
difference it writes is the difference to what is stored.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import anyio
from etcd3gw.client import Etcd3Client

from bkframe.core.metadata import LedgerMetadata
from bkframe.errors import BadVersionError, LedgerExistsError, NoSuchLedgerError
from bkframe_metadata_etcd.kv import MAX_ID, b64, id_items

T = TypeVar("T")
#: How often a watch polls for a new version.
WATCH_POLL_S = 0.05


def _put(key: bytes, value: bytes = b"") -> dict[str, Any]:
    return {"request_put": {"key": b64(key), "value": b64(value)}}


def _delete(key: bytes) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def _compare(key: bytes, target: str, value: int) -> dict[str, Any]:
    field = {"VERSION": "version", "MOD": "mod_revision"}[target]
    return {"key": b64(key), "result": "EQUAL", "target": target, field: value}


class EtcdLedgers:
    """Mixed into :class:`~bkframe_metadata_etcd.store.EtcdMetadataStore`."""

    root: str
    #: The id counter as last seen: (last id handed out, the key's version; 0: no key yet).
    _counter: tuple[int, int]

    async def _call(self, fn: Callable[[Etcd3Client], T]) -> T:
        raise NotImplementedError

    def _ledger(self, ledger_id: int) -> bytes:
        return f"{self.root}/ledgers/L{ledger_id:019d}".encode()

    def _index_prefix(self, bookie_id: str) -> bytes:
        return f"{self.root}/bookieledgers/{bookie_id}/L".encode()

    def _index(self, bookie_id: str, ledger_id: int) -> bytes:
        return self._index_prefix(bookie_id) + f"{ledger_id:019d}".encode()

    @staticmethod
    def _stored(client: Etcd3Client, key: bytes) -> tuple[LedgerMetadata, int] | None:
        """The stored metadata and its ``mod_revision``, or None."""
        found = client.get(key, metadata=True)
        if not found:
            return None
        value, kv = found[0]
        return LedgerMetadata.deserialize(value, int(kv["version"])), int(kv["mod_revision"])

    def _rewrite(self, client: Etcd3Client, ledger_id: int, requests: Callable[[LedgerMetadata], list[dict[str, Any]]]) -> None:
        """One transaction of ``requests(stored metadata)``, compared with the ``mod_revision``
        read, so that the index keys it writes or deletes are those of what is stored; read
        and sent again until it goes through (the metadata moved or went since the read)."""
        key = self._ledger(ledger_id)
        while True:
            found = self._stored(client, key)
            if found is None:
                raise NoSuchLedgerError(ledger_id)
            stored, mod_revision = found
            txn = {"compare": [_compare(key, "MOD", mod_revision)], "success": requests(stored), "failure": []}
            if client.transaction(txn).get("succeeded", False):
                return

    # -- ids -----------------------------------------------------------------------------------

    async def new_ledger_id(self) -> int:
        return (await self.new_ledger_ids(1))[0]

    async def new_ledger_ids(self, count: int) -> range:
        """One transaction: put the counter + ``count`` if it is at the version this store saw
        last, else read it (in the same transaction) and try again with what it read."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        key = f"{self.root}/idgen".encode()

        def take(client: Etcd3Client) -> range:
            while True:
                last, version = self._counter
                txn = {
                    "compare": [_compare(key, "VERSION", version)],
                    "success": [_put(key, str(last + count).encode())],
                    "failure": [{"request_range": {"key": b64(key)}}],
                }
                result = client.transaction(txn)
                if result.get("succeeded", False):
                    self._counter = last + count, version + 1
                    return range(last + 1, last + count + 1)
                kvs = result["responses"][0]["response_range"].get("kvs", [])
                self._counter = (int(base64.b64decode(kvs[0]["value"])), int(kvs[0]["version"])) if kvs else (0, 0)

        return await self._call(take)

    # -- ledger metadata -----------------------------------------------------------------------

    async def create_ledger(self, metadata: LedgerMetadata) -> LedgerMetadata:
        data = metadata.serialize()
        key = self._ledger(metadata.ledger_id)
        txn = {
            "compare": [_compare(key, "VERSION", 0)],
            "success": [_put(key, data), *(_put(self._index(b, metadata.ledger_id)) for b in sorted(metadata.bookies()))],
            "failure": [],
        }

        def create(client: Etcd3Client) -> int:
            if client.transaction(txn).get("succeeded", False):
                return 1
            # The transaction sent again (``_call`` retries one whose answer was lost, maybe
            # on another member) finds the key its first send wrote: the very same bytes are
            # this create's. Taken for another's, the client would move to the next id and
            # leave this one an open, empty ledger nobody knows.
            found = client.get(key, metadata=True)
            if found and found[0][0] == data:
                return int(found[0][1]["version"])
            raise LedgerExistsError(metadata.ledger_id)

        return LedgerMetadata.deserialize(data, await self._call(create))

    async def read_ledger(self, ledger_id: int) -> LedgerMetadata:
        found = await self._call(lambda c: self._stored(c, self._ledger(ledger_id)))
        if found is None:
            raise NoSuchLedgerError(ledger_id)
        return found[0]

    async def update_ledger(self, metadata: LedgerMetadata, expected_version: int) -> LedgerMetadata:
        data = metadata.serialize()
        ledger_id = metadata.ledger_id
        key = self._ledger(ledger_id)

        def update(stored: LedgerMetadata) -> list[dict[str, Any]]:
            if stored.version != expected_version:
                raise BadVersionError(f"ledger {ledger_id} is at version {stored.version}, not {expected_version}")
            old, new = stored.bookies(), metadata.bookies()
            return [
                _put(key, data),
                *(_put(self._index(b, ledger_id)) for b in sorted(new - old)),
                *(_delete(self._index(b, ledger_id)) for b in sorted(old - new)),
            ]

        await self._call(lambda c: self._rewrite(c, ledger_id, update))
        return LedgerMetadata.deserialize(data, expected_version + 1)

    async def delete_ledger(self, ledger_id: int) -> None:
        key = self._ledger(ledger_id)

        def delete(stored: LedgerMetadata) -> list[dict[str, Any]]:
            return [_delete(key), *(_delete(self._index(b, ledger_id)) for b in sorted(stored.bookies()))]

        await self._call(lambda c: self._rewrite(c, ledger_id, delete))

    def _ceiling(self, client: Etcd3Client) -> int:
        """The largest id handed out (0 if none): where :func:`~bkframe_metadata_etcd.kv.id_items`
        stops asking in windows."""
        found = client.get(f"{self.root}/idgen".encode())
        return int(found[0]) if found else 0

    async def _ids(self, prefix: bytes, start: int, limit: int | None) -> list[int]:
        if limit == 0 or start > MAX_ID:
            return []
        found = await self._call(lambda c: id_items(c, prefix, max(start, 0), limit, self._ceiling(c), keys_only=True))
        return [ledger_id for ledger_id, _ in found]

    async def list_ledgers(self, *, start: int = 0, limit: int | None = None) -> list[int]:
        return await self._ids(f"{self.root}/ledgers/L".encode(), start, limit)

    async def ledgers_of_bookie(self, bookie_id: str, *, start: int = 0, limit: int | None = None) -> list[int]:
        return await self._ids(self._index_prefix(bookie_id), start, limit)

    async def watch_ledger(self, ledger_id: int) -> AsyncIterator[LedgerMetadata | None]:
        """Polls by version (the gateway's streaming watch would need a thread of its own
        for as long as the watch lives)."""
        last: int | None = -1
        while True:
            found = await self._call(lambda c: self._stored(c, self._ledger(ledger_id)))
            version = None if found is None else found[0].version
            if version != last:
                last = version
                if found is None:
                    yield None
                    return
                yield found[0]
            await anyio.sleep(WATCH_POLL_S)
