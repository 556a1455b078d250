"""A bookie connection's socket used directly, beside its stream, where that saves a
scheduler pass per message (:mod:`bkframe.common.socket_io`, as the bookie does): a send from the task that submits a request
(:meth:`BookieClient._enqueue <bkframe.client.bookies.connection.BookieClient._enqueue>`) and a
receive that waits until the socket is readable (the connection's receive loop).

anyio's ``send`` is a checkpoint: on trio a successful socket send ends with a scheduler pass
of its own, and the connection's send loop, woken by an event, costs one more before that. A
request to an idle bookie need not wait for either: the socket takes it at once, or takes
part of it and the send loop sends the rest. anyio's receive on trio tries the socket first;
with one request in flight nothing is there yet, and that costs a failed ``recv``, an
exception and a second pass for every answer.

Only plaintext streams have a socket to use: on TLS the bytes must go through the TLS
object, and anyio's asyncio stream buffers in a transport of its own (the client uses
:mod:`bkframe.client.bookies.asyncio_stream` there, which has a send without waiting and waits for data already).
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
import anyio.abc
import sniffio

from bkframe.client.bookies.asyncio_stream import AsyncioStream
from bkframe.common.socket_io import ReadWhenReadable, send_now
from bkframe.core.interfaces import Buffer


def _trio_socket(stream: anyio.abc.ByteStream) -> socket.socket | None:
    """The non-blocking socket under anyio's plaintext stream on trio (None for others)."""
    if isinstance(stream, anyio.abc.SocketStream) and sniffio.current_async_library() == "trio":
        sock: socket.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        return sock
    return None


def nonblocking_send(stream: anyio.abc.ByteStream) -> Callable[[Buffer], int] | None:
    """A function that sends what it can of its argument now and returns how many bytes that
    was (0 when the socket takes nothing, or is broken: the send loop then says so); None
    when ``stream`` has none."""
    if isinstance(stream, AsyncioStream):
        return stream.send_nowait
    sock = _trio_socket(stream)
    return partial(send_now, sock) if sock is not None else None


#: At most this many buffers go in one ``writev`` (Linux's IOV_MAX).
IOV_MAX = 1024


def scattered_sender(stream: anyio.abc.ByteStream) -> Callable[[list[Buffer]], Awaitable[None]] | None:
    """Under trio, a send of a frame's parts from the buffers themselves (:func:`send_scattered`);
    None for other streams (they send a joined frame)."""
    sock = _trio_socket(stream)
    return partial(send_scattered, sock) if sock is not None else None


async def send_scattered(sock: socket.socket, parts: list[Buffer]) -> None:
    """Send ``parts``, in order, with ``writev`` from the buffers themselves, waiting while the
    socket is full: a frame of large entries is not first joined into one ``bytes``, which
    copied every payload byte once more for each bookie of the write set. OSError when the
    connection failed or was closed."""
    views = [memoryview(part) for part in parts]
    at = 0
    while True:
        while at < len(views) and not views[at].nbytes:
            at += 1
        if at == len(views):
            return
        fd = sock.fileno()  # each time: -1 once closed (the number may be reused)
        if fd < 0:
            raise OSError(errno.EBADF, "the connection is closed")
        try:
            sent = os.writev(fd, views[at : at + IOV_MAX])
        except BlockingIOError:
            await anyio.wait_writable(sock)
            continue
        while sent:
            view = views[at]
            if sent < view.nbytes:
                views[at] = view[sent:]
                break
            sent -= view.nbytes
            at += 1


def readable_receiver(stream: anyio.abc.ByteStream) -> Callable[[int], Awaitable[bytes]] | None:
    """Under trio, a receive that waits until the socket is readable, then reads it
    (:class:`~bkframe.common.socket_io.ReadWhenReadable`: empty once the bookie closed the
    connection); None for other streams (they receive through the stream)."""
    sock = _trio_socket(stream)
    return ReadWhenReadable(sock, anyio.wait_readable).receive if sock is not None else None
