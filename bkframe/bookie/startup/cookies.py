"""Cookies and the data dir's marks (BP-46): a bookie's identity stamped on its data dir and
in the metadata store, and the marks that tell the next start what the last run may have lost.

At boot the two cookies are compared. A new bookie stamps both. A data dir without a cookie
(or with another bookie's, or another instance's) while the metadata store has one means the
disk was lost or replaced, so entries this bookie acknowledged may be gone: the bookie
refuses to start unless ``auto_fix_cookies`` is on (then it re-stamps, and marks the data
dir as possibly missing data until boot protection is durable), and says which command
fixes it by hand. See BP-46's table of cookie cases.

Unclean-shutdown detection: a marker file (:data:`UNCLEAN_MARKER`) set at start, cleared on
a clean stop. A crash, SIGKILL or power cut leaves it behind, so the next start knows the
last shutdown was not clean and that writes not yet fsynced may be gone.
"""

from __future__ import annotations

import enum
import json
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

import attrs

from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.errors import BKError
from bkframe.storage_kit.disk_full import DISK_FULL_ERRNOS
from bkframe.storage_kit.fsync import remove_durably, write_durably

COOKIE_FILE = "cookie.json"
#: Present while a re-stamped data dir still needs boot protection (see mark_data_loss).
DATA_LOSS_MARKER = "DATA_LOSS_SUSPECTED"
#: Present while a bookie runs: left behind, it says the last shutdown was not clean.
UNCLEAN_MARKER = "UNCLEAN_SHUTDOWN"


class CookieError(BKError):
    """The data dir and the metadata store disagree about who this bookie is."""


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class Cookie:
    bookie_id: str
    address: str
    data_dirs: tuple[str, ...] = attrs.field(converter=_str_tuple)
    instance_id: str

    def serialize(self) -> bytes:
        return json.dumps(attrs.asdict(self), sort_keys=True).encode()

    @classmethod
    def deserialize(cls, data: bytes, where: str) -> Cookie:
        try:
            return cls(**json.loads(data))
        except (ValueError, TypeError) as e:
            raise CookieError(f"cookie in {where} does not parse ({e}); 'bkframe cookie fix' writes a new one") from None


def read_local(data_dir: Path) -> Cookie | None:
    path = data_dir / COOKIE_FILE
    try:
        return Cookie.deserialize(path.read_bytes(), str(path))
    except FileNotFoundError:
        return None


def write_local(data_dir: Path, cookie: Cookie) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    write_durably(data_dir / COOKIE_FILE, cookie.serialize())


class CookieCheck(enum.Enum):
    NEW = "new bookie: stamped the data dir and the metadata store"
    MATCH = "cookies match"
    STAMPED_METADATA = "the metadata store had no cookie: stamped it from the data dir"
    FIXED = "the data dir was missing or replaced: re-stamped (auto_fix_cookies)"

    @property
    def data_loss_suspected(self) -> bool:
        return self is CookieCheck.FIXED


def cookie_conflict(local: Cookie | None, remote: Cookie | None, bookie_id: str) -> str | None:
    """Why bookie ``bookie_id`` with the data dir's cookie ``local`` is not the bookie the
    metadata store's cookie ``remote`` stands for, or None if nothing is in the way (they match,
    or the store knows no such bookie and the data dir is this bookie's or new)."""
    if local is not None and local.bookie_id != bookie_id:
        return f"its data dir belongs to bookie {local.bookie_id!r}"
    if remote is None:
        return None
    if local is None:
        return "its data dir has no cookie: the dir is new, missing or was wiped"
    if local.instance_id != remote.instance_id:
        return "its data dir holds another instance's cookie: the dir was replaced (e.g. restored from a backup)"
    return None


def _new_cookie(bookie_id: str, address: str, data_dir: Path) -> Cookie:
    return Cookie(bookie_id, address, (str(data_dir.resolve()),), uuid.uuid4().hex)


async def check_cookies(
    store: MetadataStore, data_dir: Path, bookie_id: str, address: str, *, auto_fix: bool, metadata_uri: str
) -> CookieCheck:
    """Compare the data dir's cookie with the metadata store's; stamp or refuse."""
    local = read_local(data_dir)
    remote_v = await store.read_cookie(bookie_id)
    remote = Cookie.deserialize(remote_v.value, f"the metadata store ({bookie_id})") if remote_v else None
    if local is None and remote is None:
        cookie = _new_cookie(bookie_id, address, data_dir)
        write_local(data_dir, cookie)
        await store.write_cookie(bookie_id, cookie.serialize(), None)
        return CookieCheck.NEW
    if local is not None and remote is None and local.bookie_id == bookie_id:
        await store.write_cookie(bookie_id, local.serialize(), None)
        return CookieCheck.STAMPED_METADATA
    problem = cookie_conflict(local, remote, bookie_id)
    if problem is None:
        return CookieCheck.MATCH
    if not auto_fix:
        raise CookieError(
            f"bookie {bookie_id!r} refuses to start: {problem}, but the metadata store knows this bookie. "
            f"Entries it acknowledged may be lost. If that is understood, run "
            f"'bkframe cookie fix --data-dir {data_dir} --metadata {metadata_uri} --bookie-id {bookie_id}' "
            f"or set [bookie] auto_fix_cookies = true"
        )
    await fix_cookies(store, data_dir, bookie_id, address)
    return CookieCheck.FIXED


def mark_data_loss(data_dir: Path) -> None:
    """Durably note that this data dir may lack what the bookie acknowledged.

    Written before a cookie is re-stamped, removed only once boot protection is durable,
    so a crash in between (or a fix by hand with ``bkframe cookie fix``) still leads the
    next boot to protect every ledger.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    write_durably(data_dir / DATA_LOSS_MARKER, b"cookie re-stamped: protect every ledger at the next boot\n")


def data_loss_marked(data_dir: Path) -> bool:
    return (data_dir / DATA_LOSS_MARKER).exists()


def clear_data_loss(data_dir: Path) -> None:
    remove_durably(data_dir / DATA_LOSS_MARKER)


async def fix_cookies(store: MetadataStore, data_dir: Path, bookie_id: str, address: str) -> Cookie:
    """Stamp a new instance on the data dir and (CAS) in the metadata store."""
    mark_data_loss(data_dir)
    cookie = _new_cookie(bookie_id, address, data_dir)
    remote = await store.read_cookie(bookie_id)
    write_local(data_dir, cookie)
    await store.write_cookie(bookie_id, cookie.serialize(), remote.version if remote else None)
    return cookie


def mark_running(data_dir: Path) -> bool:
    """Set the marker durably; return whether the previous shutdown was clean."""
    path = data_dir / UNCLEAN_MARKER
    clean = not path.exists()
    try:
        write_durably(path, f"pid {os.getpid()}\n".encode())
    except OSError as e:
        # The marker is its existence; the pid only helps people. On a full disk (a
        # bookie must still start there, read-only) an empty marker, which needs no
        # data block, does.
        if e.errno not in DISK_FULL_ERRNOS:
            raise
        write_durably(path, b"")
    return clean


def mark_clean(data_dir: Path) -> None:
    """Clear the marker durably, after everything else is flushed."""
    remove_durably(data_dir / UNCLEAN_MARKER)
