"""The built-in ``filesystem`` tier, scheme ``file``: objects as files under a directory on
local disk or a shared mount (``file:///srv/bkframe-tier``), the embedded default.

A key ``logs/events/0001.parquet`` is the file ``ROOT/logs/events/0001.parquet``. A put
streams into a temporary file under ``ROOT/.bkframe-tmp`` (the same filesystem, so it can
be linked into place), fsyncs it, then links it in -- ``os.link``, which fails if the name
exists, for ``if_absent``; ``os.replace`` otherwise -- and fsyncs the directory: a reader
sees the whole object or none, and a crash keeps the whole object or none. The temporary
files of puts that died (the process was killed) are removed by a later put or list once
they are older than ``temp_grace_s`` (a put in progress keeps its file's mtime fresh).

Options, in the URI's query: ``create=true`` makes a missing directory (by default a
missing one is an error: an unmounted share must not fill the root filesystem instead),
``temp_grace_s=SECONDS`` (default 3600).

What a directory cannot do that S3 can: hold an object ``a/b`` and an object ``a/b/c``
(a name is a file or a directory); such a put is a TierError saying so. bkframe's own
keys never collide that way. The top-level name ``.bkframe-tmp`` is reserved.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces.tier import InvalidKeyError, ObjectInfo, Source, check_key, check_prefix, open_source, query_options
from bkframe.core.registry import ComponentRegistry
from bkframe.errors import ConfigError, NoSuchObjectError, ObjectExistsError, TierError
from bkframe.storage_kit.disk_full import is_disk_full
from bkframe.storage_kit.fsync import fsync_dir

log = logging.getLogger("bkframe.tier.filesystem")

#: Where puts write before linking into place; reserved as a top-level key part.
TEMP_DIR = ".bkframe-tmp"
DEFAULT_TEMP_GRACE_S = 3600.0
#: How often (at most) a put or list looks for temporary files of dead puts.
SWEEP_EVERY_S = 60.0
COPY_CHUNK = 1 << 20
#: Errors of a link whose target's parent is an object (a file), or whose name is a directory.
_CONFLICT_ERRNOS = frozenset({errno.ENOTDIR, errno.EISDIR})


def _etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while chunk := stream.read(COPY_CHUNK):
        yield chunk


class FilesystemTier:
    """A :class:`~bkframe.core.interfaces.tier.Tier` on a directory (see the module docstring).
    Thread-safe: it keeps no state but when it last swept temporary files."""

    def __init__(self, root: Path, *, create: bool = False, temp_grace_s: float = DEFAULT_TEMP_GRACE_S) -> None:
        self.root = root
        self.uri = root.as_uri()
        self.temp_grace_s = temp_grace_s
        self._temp = root / TEMP_DIR
        self._sweep_lock = threading.Lock()
        self._last_sweep = float("-inf")
        if not root.is_dir():
            if not create:
                raise ConfigError(
                    f"tier {self.uri}: the directory {root} does not exist; create it (or mount the share), "
                    "or add ?create=true to the URI"
                )
            root.mkdir(parents=True, exist_ok=True)
            fsync_dir(root.parent)
        if not self._temp.is_dir():
            self._temp.mkdir(exist_ok=True)
            fsync_dir(root)

    # -- keys -------------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        parts = check_key(key).split("/")
        if parts[0] == TEMP_DIR:
            raise InvalidKeyError(f"tier key {key!r}: {TEMP_DIR} is reserved by the filesystem tier")
        return self.root.joinpath(*parts)

    def _error(self, op: str, key: str, e: OSError) -> TierError:
        if is_disk_full(e):
            return TierError(f"tier {self.uri}: {op} {key!r}: the tier's filesystem is full ({e.strerror})")
        return TierError(f"tier {self.uri}: {op} {key!r}: {e.strerror or e}")

    def _conflict(self, key: str) -> TierError:
        return TierError(
            f"tier {self.uri}: put {key!r}: a directory tier cannot hold both an object and keys under it "
            "(a part of the key is an object, or the key is a prefix of other keys)"
        )

    # -- the Tier protocol ------------------------------------------------------------------

    def put(self, key: str, source: Source, *, if_absent: bool = False) -> ObjectInfo:
        dest = self._path(key)
        self._sweep_temps()
        tmp = self._temp / f"{uuid.uuid4().hex}.part"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as e:
            raise self._error("put", key, e) from e
        try:
            try:
                # Errors reading the source are the caller's and go up as they are; the
                # tier's own (a write, an fsync) become TierError.
                with open_source(source) as stream:
                    for chunk in _chunks(stream):
                        try:
                            _write_all(fd, chunk)
                        except OSError as e:
                            raise self._error("put", key, e) from e
                try:
                    os.fsync(fd)
                    st = os.fstat(fd)
                except OSError as e:
                    raise self._error("put", key, e) from e
            finally:
                os.close(fd)
            self._link(tmp, dest, key, if_absent=if_absent)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        # A link and a rename keep the inode and the mtime: the stat of the temporary file is the object's.
        return ObjectInfo(key, st.st_size, st.st_mtime, _etag(st))

    def _link(self, tmp: Path, dest: Path, key: str, *, if_absent: bool) -> None:
        for attempt in range(3):
            self._make_parents(dest.parent, key)
            try:
                if if_absent:
                    os.link(tmp, dest)
                    tmp.unlink()
                else:
                    os.replace(tmp, dest)
                break
            except FileNotFoundError as e:
                # A delete removed the (empty) parent meanwhile: make it again.
                if attempt == 2:
                    raise self._error("put", key, e) from e
            except FileExistsError as e:
                if dest.is_dir():
                    raise self._conflict(key) from e
                raise ObjectExistsError(f"tier {self.uri}: {key!r} exists") from e
            except OSError as e:
                if e.errno in _CONFLICT_ERRNOS:
                    raise self._conflict(key) from e
                raise self._error("put", key, e) from e
        try:
            fsync_dir(dest.parent)
        except OSError as e:
            raise self._error("put", key, e) from e

    def _make_parents(self, parent: Path, key: str) -> None:
        """Make the directories down to ``parent``, each new one made durable in its parent."""
        if parent.is_dir():
            return
        current = self.root
        for part in parent.relative_to(self.root).parts:
            child = current / part
            try:
                os.mkdir(child)
                fsync_dir(current)
            except FileExistsError as e:
                if not child.is_dir():
                    raise self._conflict(key) from e
            except OSError as e:
                if e.errno in _CONFLICT_ERRNOS:
                    raise self._conflict(key) from e
                raise self._error("put", key, e) from e
            current = child

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        path = self._path(key)
        if offset < 0 or length < 0:
            raise ValueError(f"get_range({key!r}, {offset}, {length}): offset and length are >= 0")
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            raise NoSuchObjectError(f"tier {self.uri}: no object {key!r}") from None
        except OSError as e:
            raise self._error("get", key, e) from e
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NoSuchObjectError(f"tier {self.uri}: no object {key!r}")
            chunks: list[bytes] = []
            got = 0
            while got < length:
                chunk = os.pread(fd, length - got, offset + got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks)
        except OSError as e:
            raise self._error("get", key, e) from e
        finally:
            os.close(fd)

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise self._error("head", key, e) from e
        if not stat.S_ISREG(st.st_mode):
            return None
        return ObjectInfo(key, st.st_size, st.st_mtime, _etag(st))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        self._sweep_temps()
        directory, _, _ = prefix.rpartition("/")
        start = self.root.joinpath(*directory.split("/")) if directory else self.root
        return self._walk(start, f"{directory}/" if directory else "", prefix)

    def _walk(self, directory: Path, base: str, prefix: str) -> Iterator[ObjectInfo]:
        """The objects under ``directory`` (whose keys start with ``base``) that match
        ``prefix``, in key order: a directory ``d`` sorts as ``d/``, where its keys do."""
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as e:
            raise self._error("list", prefix, e) from e
        found: list[tuple[str, os.DirEntry[str], bool]] = []
        for entry in entries:
            if not base and entry.name == TEMP_DIR:
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                if not is_dir and not entry.is_file(follow_symlinks=False):
                    continue
            except OSError:
                continue
            key = base + entry.name + ("/" if is_dir else "")
            if key.startswith(prefix) or (is_dir and prefix.startswith(key)):
                found.append((key, entry, is_dir))
        found.sort(key=lambda f: f[0])
        for key, entry, is_dir in found:
            if is_dir:
                yield from self._walk(Path(entry.path), key, prefix)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # deleted meanwhile
            yield ObjectInfo(key, st.st_size, st.st_mtime, _etag(st))

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return
        except OSError as e:
            raise self._error("delete", key, e) from e
        try:
            fsync_dir(path.parent)
        except OSError as e:
            raise self._error("delete", key, e) from e
        # Empty directories left behind would pile up; a put that needs one makes it again.
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def close(self) -> None:
        pass

    # -- temporary files of dead puts -------------------------------------------------------

    def _sweep_temps(self) -> None:
        """Remove temporary files older than the grace (at most every SWEEP_EVERY_S or the
        grace, whichever is shorter). Best effort: a failure is logged, never raised."""
        now = time.monotonic()
        with self._sweep_lock:
            if now - self._last_sweep < min(SWEEP_EVERY_S, self.temp_grace_s):
                return
            self._last_sweep = now
        cutoff = time.time() - self.temp_grace_s
        try:
            with os.scandir(self._temp) as it:
                for entry in it:
                    try:
                        if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                            os.unlink(entry.path)
                            log.info("tier %s: removed %s, left by a put that died", self.uri, entry.name)
                    except FileNotFoundError:
                        pass
        except OSError as e:
            log.warning("tier %s: cannot sweep temporary files: %s", self.uri, e)


def open_tier(uri: str) -> FilesystemTier:
    """``file:///ABSOLUTE/PATH[?create=true&temp_grace_s=SECONDS]``."""
    parts = urlsplit(uri)
    usage = "expected file:///ABSOLUTE/PATH[?create=true&temp_grace_s=SECONDS]"
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or not parts.path.startswith("/") or parts.fragment:
        raise ConfigError(f"tier URI {uri!r}: {usage}")
    options = query_options(parts.query, ("create", "temp_grace_s"), where=f"tier URI {uri!r}")
    create = options.get("create", "false").lower()
    if create not in ("true", "false"):
        raise ConfigError(f"tier URI {uri!r}: create is true or false")
    try:
        grace = float(options.get("temp_grace_s", DEFAULT_TEMP_GRACE_S))
    except ValueError:
        grace = -1.0
    if not grace >= 0:
        raise ConfigError(f"tier URI {uri!r}: temp_grace_s is a number of seconds >= 0")
    return FilesystemTier(Path(unquote(parts.path)), create=create == "true", temp_grace_s=grace)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_tier("file", open_tier, description="file:///PATH: a directory on local disk or a shared mount")
