"""Who a bookie is and where others reach it: its id, whether another bookie already holds
it, and the address it advertises.

The default id is stable across restarts and unique per machine: the id the data dir's
cookie records (stamped at the bookie's first start), else ``ADVERTISED_HOST:PORT``.

Two bookies may never hold one id. Before its data dir or the metadata store is stamped, a
starting bookie looks for a live registration of its id: one of its own previous life (the
same cookie instance) is fine; one left by a dead process of this machine (same advertised
host, its pid gone) is replaced; another bookie's is waited for about a registration TTL (a
bookie that just died on another machine has not expired yet) and then refused with
:class:`~bkframe.errors.BookieIdInUseError` -- nothing deleted, nothing stamped.

The advertised address is BookKeeper's ``advertisedAddress``: a bookie may bind a wildcard
(``0.0.0.0``, ``::``) to accept connections on every interface, but what it registers --
what clients, other bookies and Spark executors on other machines connect to -- must be one
address they can reach. A bookie never registers a wildcard. The advertised host is, in
order: ``[bookie] advertised_address`` (``HOST`` or ``HOST:PORT``); the bind host when it is
a specific address; the machine's hostname when it resolves to an address that is not
loopback; else the machine's primary address (the source address of its default route,
else the first address that is not loopback of an interface that is up). The advertised
port is the bound port unless the configured address names one.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from pathlib import Path

import attrs
import psutil
import trio

from bkframe.bookie.startup.cookies import read_local
from bkframe.core.config import is_wildcard, split_address
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import BookieInfo, id_in_use
from bkframe.errors import ConfigError

#: An address of TEST-NET-1 (RFC 5737): connecting a UDP socket to it sends nothing and
#: tells which source address the default route would use.
_ROUTE_PROBE = ("192.0.2.1", 9)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


@attrs.frozen
class Advertised:
    """The address a bookie registers: ``host``, ``port``, and where the host came from."""

    host: str
    port: int
    #: "advertised_address", "the bind host", "the hostname" or "the primary address".
    source: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def primary_address() -> str | None:
    """The machine's primary address: the default route's source address, else the first
    address (IPv4 before IPv6, by interface name) of an interface that is up and not loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(_ROUTE_PROBE)
            address = str(probe.getsockname()[0])
        except OSError:  # no default route (as in a test host's network namespace)
            address = ""
    if address and not _is_loopback(address) and address != "0.0.0.0":
        return address
    stats = psutil.net_if_stats()
    found: list[tuple[int, str, str]] = []
    for name, addrs in psutil.net_if_addrs().items():
        if name not in stats or not stats[name].isup:
            continue
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(a.address.split("%")[0]):
                if a.family == socket.AF_INET6 and ipaddress.ip_address(a.address.split("%")[0]).is_link_local:
                    continue  # needs a scope id: no use to another machine's client
                family_rank = 0 if a.family == socket.AF_INET else 1
                host = a.address if a.family == socket.AF_INET else f"[{a.address}]"
                found.append((family_rank, name, host))
    return min(found)[2] if found else None


def _hostname_reaches_out() -> str | None:
    """The hostname, if it resolves and none of its addresses is loopback (Debian maps its
    own hostname to 127.0.1.1 in /etc/hosts: no use to another machine)."""
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:
        return None
    addresses = {str(info[4][0]) for info in infos}
    if not addresses or any(_is_loopback(a) or a.startswith("127.") for a in addresses):
        return None
    return name


def advertised(bind_host: str, bound_port: int, configured: str = "") -> Advertised:
    """The address to register for a bookie bound to ``bind_host:bound_port``."""
    if configured.strip():
        host, port = split_address(configured, "[bookie] advertised_address")
        return Advertised(host, port if port is not None else bound_port, "advertised_address")
    if not is_wildcard(bind_host):
        return Advertised(bind_host, bound_port, "the bind host")
    name = _hostname_reaches_out()
    if name is not None:
        return Advertised(name, bound_port, "the hostname")
    address = primary_address()
    if address is None:
        raise ConfigError(
            f"the bookie binds {bind_host or 'every interface'} and this machine has no address other "
            f"machines could reach (its hostname is loopback and no interface is up): "
            f"set [bookie] advertised_address (--advertised-address)"
        )
    return Advertised(address, bound_port, "the primary address")


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
