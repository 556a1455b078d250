"""A non-blocking send on a bookie connection's stream, for requests sent from the task that
submits them (:meth:`BookieClient._enqueue <bkframe.client.bookie_client.BookieClient._enqueue>`).

anyio's ``send`` is a checkpoint: on trio a successful socket send ends with a scheduler pass
of its own, and the connection's send loop, woken by an event, costs one more before that. A
request to an idle bookie need not wait for either: the socket takes it at once, or takes
part of it and the send loop sends the rest. Only plaintext streams have such a send: on TLS
the bytes must go through the TLS object, and anyio's asyncio stream buffers in a transport
of its own (the client uses :mod:`.asyncio_stream` there, which has one).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.abc
import sniffio

from bkframe.client.asyncio_stream import AsyncioStream
from bkframe.core.interfaces import Buffer


def nonblocking_send(stream: anyio.abc.ByteStream) -> Callable[[Buffer], int] | None:
    """A function that sends what it can of its argument now and returns how many bytes that
    was (0, or BlockingIOError, when the socket takes nothing; OSError when it is broken);
    None when ``stream`` has none."""
    if isinstance(stream, AsyncioStream):
        return stream.send_nowait
    if isinstance(stream, anyio.abc.SocketStream) and sniffio.current_async_library() == "trio":
        # anyio's trio stream over a non-blocking socket: the socket's own send.
        return stream.extra(anyio.abc.SocketAttribute.raw_socket).send
    return None
