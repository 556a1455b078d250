"""Who a bookie is: its id, and whether another bookie already holds it.

The default id is stable across restarts and unique per machine: the id the data dir's
cookie records (stamped at the bookie's first start), else ``ADVERTISED_HOST:PORT``.

Two bookies may never hold one id. Before its data dir or the metadata store is stamped, a
starting bookie looks for a live registration of its id: one of its own previous life (the
same cookie instance) is fine; one left by a dead process of this machine (same advertised
host, its pid gone) is replaced; another bookie's is waited for about a registration TTL (a
bookie that just died on another machine has not expired yet) and then refused with
:class:`~bkframe.errors.BookieIdInUseError` -- nothing deleted, nothing stamped.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psutil
import trio

from bkframe.bookie.address import Advertised
from bkframe.bookie.cookies import read_local
from bkframe.core.config import split_address
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import BookieInfo, id_in_use

log = logging.getLogger("bkframe.bookie")

#: Seconds between looks at a registration that may be about to expire.
POLL_S = 0.5
#: Deadline of each metadata request made here.
REQUEST_TIMEOUT_S = 10.0


def default_bookie_id(data_dir: Path, advertised: Advertised) -> str:
    """The id recorded in the data dir's cookie, else ``ADVERTISED_HOST:PORT``."""
    local = read_local(data_dir)
    return local.bookie_id if local is not None else str(advertised)


def _dead_here(held: BookieInfo, advertised: Advertised) -> bool:
    """Whether ``held`` was registered by a process of this machine that is gone."""
    try:
        host, _ = split_address(held.address, "registered address")
    except ValueError:
        return False
    return host == advertised.host and held.pid > 0 and held.pid != os.getpid() and not psutil.pid_exists(held.pid)


async def claim_id(
    store: MetadataStore, bookie_id: str, data_dir: Path, advertised: Advertised, *, wait_s: float
) -> BookieInfo | None:
    """Check that no other live bookie holds ``bookie_id``; wait up to ``wait_s`` for another
    bookie's registration to expire. Returns a stale registration (of a dead process of
    this machine) for :meth:`MetadataStore.register_bookie` to replace, or None.

    Raises BookieIdInUseError if another bookie still holds the id after ``wait_s``."""
    local = read_local(data_dir)
    deadline = trio.current_time() + wait_s
    warned = False
    while True:
        with trio.fail_after(REQUEST_TIMEOUT_S):
            held = next((b for b in await store.list_bookies() if b.bookie_id == bookie_id), None)
        if held is None or (local is not None and held.instance == local.instance_id):
            return None
        if _dead_here(held, advertised):
            log.info("bookie %s: replacing the registration of a process of this machine that is gone (pid %d)",
                     bookie_id, held.pid)
            return held
        wanted = BookieInfo(bookie_id, str(advertised), pid=os.getpid(), instance=local.instance_id if local else "")
        if trio.current_time() >= deadline:
            raise id_in_use(held, wanted)
        if not warned:
            log.warning(
                "bookie id %s is registered by another bookie (at %s, pid %d): waiting up to %.0f s for that "
                "registration to expire before refusing to start", bookie_id, held.address, held.pid, wait_s,
            )
            warned = True
        await trio.sleep(POLL_S)
