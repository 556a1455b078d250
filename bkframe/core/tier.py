"""The object-store tier: where a log's closed segments go when they leave the bookies.

A tier is a flat namespace of immutable objects under string keys (``/``-separated, as S3's),
reached by URI (``file:///srv/bkframe-tier``, ``s3://bucket/prefix?...``): a plugin registers
a factory for its URI scheme, as metadata stores do. bkframe writes an object once and never
changes it; it reads objects by byte ranges (a Parquet footer, then the row groups a read
needs), lists them by prefix (to find what no metadata names) and deletes them.

The methods are **blocking**: bkframe calls them from worker threads
(``trio.to_thread.run_sync`` with a limiter) and puts its own deadline around each call, so a
plugin may use any synchronous SDK (boto3, google-cloud-storage, azure-storage-blob, an HDFS
client) as it is. A plugin must make each call time out on its own too (its SDK's connect and
read timeouts): a thread stuck in a call that never returns is a thread lost.

Failures are :class:`~bkframe.errors.TierError` (the store failed or could not be reached:
worth trying again later), :class:`~bkframe.errors.NoSuchObjectError` and
:class:`~bkframe.errors.ObjectExistsError`; a plugin maps its SDK's errors to these and never
lets credentials into a message.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs


@attrs.frozen
class ObjectInfo:
    """What a tier knows of one stored object."""

    key: str
    size: int
    #: When it was stored (seconds since the epoch, the store's clock): the orphan sweep's
    #: grace period counts from it.
    modified: float
    #: The store's version tag of the object (S3's ETag, a file's inode and mtime), "" if none.
    etag: str = ""


@runtime_checkable
class Tier(Protocol):
    """An object store (see the module docstring). All keys are relative to the tier's URI."""

    #: The URI it was opened with, credentials removed (safe to log and show).
    uri: str

    def put(self, key: str, source: Path | bytes, *, if_absent: bool = False) -> ObjectInfo:
        """Store ``source`` (a local file, streamed -- never read whole into memory -- or
        bytes) under ``key``, whole or not at all: a reader never sees a partial object.
        With ``if_absent``, fail with ObjectExistsError if ``key`` exists (S3's
        ``If-None-Match: *``; a store without conditional writes checks first and says so in
        its docs). Without it, replace."""
        ...

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer only at the object's end).
        NoSuchObjectError if absent."""
        ...

    def head(self, key: str) -> ObjectInfo | None:
        """The object's info, or None if absent."""
        ...

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order, paged lazily."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; an absent one is no error (deletes are retried)."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...
