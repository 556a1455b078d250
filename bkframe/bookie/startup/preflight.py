"""What a bookie checks before it writes anything: its ports are free and its data dir is a
directory it can make.

A bookie that fails later in its start-up has already made its journal, stamped its cookie
on the data dir and in the metadata store, and maybe registered: a port in use or a data dir
that is a file must fail before all that, with a message that says what to change.

The ports are checked by listening on them and closing at once (as the servers will listen:
the same resolution of the host, SO_REUSEADDR), all at the same time, so the bookie's port
and the admin HTTP port cannot be the same one. Port 0 (any free port) is checked too: the
host may be no address of this machine.
Another process could take a port between the check and the server's own bind: then the
start fails as before, only later.
"""

from __future__ import annotations

import errno
from pathlib import Path

import trio

from bkframe.core.config import Config
from bkframe.errors import ConfigError


async def check_ports(config: Config, *, http: bool) -> None:
    """:class:`ConfigError` naming the setting of each port the bookie cannot listen on
    (with ``http``, the admin HTTP service's too)."""
    wanted = [(config.bookie.host, config.bookie.port, "[bookie] host and port (--host, --port)")]
    if http:
        wanted.append((config.http.host, config.http.port, "[http] host and port (--http-port)"))
    listeners: list[trio.SocketListener] = []
    try:
        for host, port, setting in wanted:
            try:
                listeners += await trio.open_tcp_listeners(port, host=host)
            except OSError as e:
                raise ConfigError(_refusal(host, port, setting, e)) from None
    finally:
        for listener in listeners:
            await listener.aclose()


def _refusal(host: str, port: int, setting: str, error: OSError) -> str:
    where = f"cannot listen on {host}:{port}, the {setting}"
    if error.errno == errno.EADDRINUSE:
        return (
            f"{where}: the port is in use (another bookie, or the other port of this one?); "
            f"stop what listens there or choose another port (0 picks a free one)"
        )
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{where}: {host} is no address of this machine; give one of its addresses or 0.0.0.0"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"{where}: not permitted (ports below 1024 need privileges); choose a port above 1023"
    return f"{where}: {error.strerror or error}"


def check_data_dir(data_dir: Path) -> None:
    """Make the data dir if it is missing; :class:`ConfigError` if it is not a directory or
    cannot be made (a parent is a file, a read-only filesystem, no permission)."""
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(
            f"the data dir {data_dir} ([bookie] data_dir, --data-dir) is a file, not a directory; "
            f"give a directory (it is made if missing)"
        )
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"cannot make the data dir {data_dir} ([bookie] data_dir, --data-dir): {e.strerror or e}"
            f"{f' ({e.filename})' if e.filename and str(e.filename) != str(data_dir) else ''}; "
            f"give a path whose parents are directories this user can write"
        ) from None
