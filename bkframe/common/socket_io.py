"""A connection's plaintext socket used directly, beside its stream, where that saves a
scheduler pass per message -- the one helper the bookie's connections
(:mod:`bkframe.bookie.serving.connection`) and the client's
(:mod:`bkframe.client.bookies.direct_socket`) both use.

- :func:`send_now`: a send that never waits. trio's ``send_all`` (and anyio's ``send`` on
  trio) end even a send the socket takes at once with a scheduler pass of their own; the
  socket takes most messages at once, and only what it does not take needs the stream.
- :class:`ReadWhenReadable`: a receive that waits until the socket is readable, then reads.
  trio's ``receive_some`` tries the socket first; with one request in flight nothing is
  there yet, and that costs a failed ``recv``, an exception and a second pass per message.
  After a read that filled its buffer more is likely waiting: then it reads first.

Only plaintext connections have a socket to use this way: on TLS the bytes must go through
the TLS object.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Protocol

from bkframe.core.interfaces import Buffer


class Socket(Protocol):
    """A socket of the stdlib or of trio (whose methods are async): used through its fd."""

    def fileno(self) -> int: ...


def send_now(sock: Socket, data: Buffer) -> int:
    """Bytes of ``data`` the socket took without waiting: 0 when it took none (it would
    block, or is closed or broken: the caller's stream then waits, or raises as its library
    does)."""
    fd = sock.fileno()  # each time: -1 once closed (the number may be reused)
    if fd < 0:
        return 0
    try:
        return os.write(fd, data)  # (a connected socket's write is its send)
    except OSError:  # BlockingIOError too
        return 0


class ReadWhenReadable:
    """Receives from a non-blocking socket: waits until it is readable (``wait_readable``,
    trio's or anyio's), then reads; after a read that filled its buffer, reads first."""

    __slots__ = ("_full", "_socket", "_wait_readable")

    def __init__(self, sock: Socket, wait_readable: Callable[[Socket], Awaitable[object]]) -> None:
        self._socket = sock
        self._wait_readable = wait_readable
        self._full = False

    async def receive(self, size: int) -> bytes:
        """Up to ``size`` bytes; empty once the peer closed its side; OSError when the
        connection failed."""
        sock = self._socket
        while True:
            if not self._full:
                await self._wait_readable(sock)
            try:
                # (a connected socket's read is its recv; the number each time: -1 once
                # closed, never another connection's reused one)
                data = os.read(sock.fileno(), size)
            except BlockingIOError:
                self._full = False  # (woken with nothing to read after all)
                continue
            self._full = len(data) == size
            return data
