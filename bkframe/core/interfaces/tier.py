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

Keys are checked the same way by every tier (:func:`check_key`): ``/``-separated relative
paths without empty, ``.`` or ``..`` parts and without NUL, at most 1024 bytes of UTF-8
(S3's and GCS's limit), so that a key means the same object on a filesystem and on S3 and
no key reaches outside a filesystem tier's directory; a bad key is
:class:`InvalidKeyError`, raised before any I/O.

Failures are :class:`~bkframe.errors.TierError` (the store failed or could not be reached:
worth trying again later), :class:`~bkframe.errors.NoSuchObjectError` and
:class:`~bkframe.errors.ObjectExistsError`; a plugin maps its SDK's errors to these and never
lets credentials into a message.
"""

from __future__ import annotations

import contextlib
import io
import urllib.parse
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

import attrs

from bkframe.errors import BKError, ConfigError

#: The longest key, in bytes of UTF-8 (S3's and GCS's limit).
MAX_KEY_BYTES = 1024

#: What a put stores: a local file (streamed), bytes, or a binary stream read to its end
#: (not closed: it is the caller's).
Source = Path | bytes | BinaryIO


class InvalidKeyError(BKError, ValueError):
    """A key (or list prefix) no tier accepts; never worth trying again, so not a TierError."""


def check_key(key: str) -> str:
    """``key`` if every tier can hold it (see the module docstring), else InvalidKeyError."""
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"tier key {key!r}: it is empty; keys are '/'-separated relative paths")
    _check_parts(key, key.split("/"), what="key")
    return key


def check_prefix(prefix: str) -> str:
    """``prefix`` if it can start keys: "" (everything), or a key's beginning -- its last
    part may be a part's beginning (``logs/ev`` lists ``logs/events/...``)."""
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"tier prefix {prefix!r}: prefixes are strings")
    if prefix:
        *dirs, last = prefix.split("/")
        _check_parts(prefix, [*dirs, last or "x"], what="prefix")
    return prefix


def _check_parts(text: str, parts: list[str], *, what: str) -> None:
    problem = ""
    if "\0" in text:
        problem = "it holds a NUL character"
    elif text.startswith("/"):
        problem = "it is absolute (starts with '/')"
    elif any(p == "" for p in parts):
        problem = "it has an empty part ('//' or a trailing '/')"
    elif any(p in (".", "..") for p in parts):
        problem = "it has a '.' or '..' part"
    elif len(text.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        problem = f"it is longer than {MAX_KEY_BYTES} bytes of UTF-8"
    if problem:
        raise InvalidKeyError(
            f"tier {what} {text[:100]!r}: {problem}; keys are '/'-separated relative paths without empty, "
            "'.' or '..' parts"
        )


def query_options(query: str, known: Collection[str], *, where: str) -> dict[str, str]:
    """A tier URI's query (``a=1&b=2``) as a dict; :class:`~bkframe.errors.ConfigError`
    for an option not in ``known`` or given twice. Messages name options, never their
    values (a mistyped option may hold a secret)."""
    options: dict[str, str] = {}
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if name not in known:
            raise ConfigError(f"{where}: unknown option {name!r} (known: {', '.join(sorted(known))})")
        if name in options:
            raise ConfigError(f"{where}: option {name!r} is given twice")
        options[name] = value
    return options


@contextlib.contextmanager
def open_source(source: Source) -> Iterator[BinaryIO]:
    """``source`` as a binary stream to read from: a file opened (and closed after), bytes
    wrapped, a stream as it is (left open: it is the caller's)."""
    if isinstance(source, bytes | bytearray | memoryview):
        yield io.BytesIO(source)
    elif isinstance(source, Path):
        with open(source, "rb") as f:
            yield f
    elif isinstance(source, str):
        # A path as a str would be taken for data or a stream: say what was meant.
        raise TypeError(f"a put's source is a Path, bytes or a binary stream, not a str ({source[:60]!r})")
    else:
        yield source


def read_full(stream: BinaryIO, size: int) -> bytes:
    """``size`` bytes from ``stream``, fewer only at its end (a pipe or socket may return
    less per read)."""
    first = stream.read(size)
    if len(first) == size or not first:
        return bytes(first)
    chunks = [first]
    got = len(first)
    while got < size:
        chunk = stream.read(size - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


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

    def put(self, key: str, source: Source, *, if_absent: bool = False) -> ObjectInfo:
        """Store ``source`` (a local file, streamed -- never read whole into memory -- bytes,
        or a binary stream read to its end, see :func:`open_source`) under ``key``, whole or
        not at all: a reader never sees a partial object, and a put that fails (the store
        failed, or reading the source raised: that error goes up as it is) leaves no object
        and nothing that costs space for long.
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
        """Every object whose key starts with ``prefix``, in key order (of the keys' UTF-8
        bytes, as S3 sorts), paged lazily: a page is fetched when the one before is used up."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; an absent one is no error (deletes are retried)."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...
