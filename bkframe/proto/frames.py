"""Frames, without I/O: :class:`FrameBuffer` turns the bytes a connection received into
whole frame bodies, :func:`frame` and :func:`pack_message` turn messages into bytes.

This is the sans-IO half of a connection (in the manner of h11): the bookie's reader and
the client's receive loop feed it what the socket gave and take frames out; every bound a
peer's bytes can hit on the way (a frame larger than the connection may send now) is
checked here, so it is tested without a socket (tests/proto/). What a frame's messages
mean: :mod:`.table`.
"""

from __future__ import annotations

from collections.abc import Iterable

from bkframe.core.interfaces import Buffer
from bkframe.errors import ProtocolError
from bkframe.proto.codes import FRAME_HEADER, MAX_FRAME_SIZE, MSG_HEADER, MSG_HEADER_REST

_unpack_length = FRAME_HEADER.unpack_from
_pack_length = FRAME_HEADER.pack
_pack_header = MSG_HEADER.pack


class FrameTooLarge(ProtocolError):
    """A frame's header says more bytes than the connection may send (its body is not
    read): the peer is not speaking this protocol, or not yet allowed to send so much."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"frame of {length} bytes exceeds the limit of {limit}")
        self.length = length
        self.limit = limit


class FrameBuffer:
    """Bytes in, whole frame bodies out.

    :meth:`feed` what the socket gave; :meth:`next_frame` returns the body of the next
    whole frame (a memoryview of immutable bytes), None while it is incomplete, and raises
    :class:`FrameTooLarge` as soon as a frame's 4-byte header is in and says more than
    :attr:`max_frame_size` -- before any of its body is held. A received chunk that holds
    whole frames is not copied: their bodies are views of it.
    """

    __slots__ = ("_at", "_buf", "_chunk", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        #: The largest frame body accepted now (the bookie lowers it until AUTH succeeds).
        self.max_frame_size = max_frame_size
        # Either a received chunk read from ``_at`` on (the usual case: no copy), or the
        # bytes of a frame that came in parts, in ``_buf``; never both.
        self._chunk: bytes | None = None
        self._at = 0
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes received and not yet taken as frames."""
        chunk = self._chunk
        return len(self._buf) if chunk is None else len(chunk) - self._at

    def feed(self, data: Buffer) -> None:
        chunk = self._chunk
        if chunk is not None:
            # The rest of a chunk is a frame in parts: gather it (one copy of the start).
            self._buf = bytearray(memoryview(chunk)[self._at :])
            self._chunk = None
            self._buf += data
        elif not self._buf and type(data) is bytes:
            self._chunk = data
            self._at = 0
        else:
            self._buf += data

    def frame_size(self) -> int:
        """The whole size (header included) of the frame under way, once its header is in;
        0 before. Check it against :attr:`max_frame_size` with :meth:`next_frame` first."""
        chunk = self._chunk
        if chunk is not None:
            at = self._at
            return 4 + _unpack_length(chunk, at)[0] if len(chunk) - at >= 4 else 0
        return 4 + _unpack_length(self._buf)[0] if len(self._buf) >= 4 else 0

    def missing(self) -> int:
        """Bytes still to receive for the frame under way (0 while its header is not in)."""
        size = self.frame_size()
        return min(size - self.buffered, 4 + MAX_FRAME_SIZE) if size else 0

    def has_frame(self) -> bool:
        """A whole frame is buffered (or a header :meth:`next_frame` will refuse)."""
        size = self.frame_size()
        return bool(size) and (size - 4 > self.max_frame_size or self.buffered >= size)

    def next_frame(self) -> memoryview | None:
        chunk = self._chunk
        if chunk is not None:
            at = self._at
            left = len(chunk) - at
            if left < 4:
                return None
            (length,) = _unpack_length(chunk, at)
            if length > self.max_frame_size:
                raise FrameTooLarge(length, self.max_frame_size)
            end = at + 4 + length
            if end > len(chunk):
                return None
            if end == len(chunk):
                self._chunk = None
            else:
                self._at = end
            return memoryview(chunk)[at + 4 : end]
        buf = self._buf
        if len(buf) < 4:
            return None
        (length,) = _unpack_length(buf)
        if length > self.max_frame_size:
            raise FrameTooLarge(length, self.max_frame_size)
        size = 4 + length
        if len(buf) < size:
            return None
        with memoryview(buf) as view:  # one copy; released before the del below
            body = bytes(view[4:size])
        del buf[:size]
        return memoryview(body)


def pack_message(op: int, flags_or_status: int, request_id: int, *fields: Buffer) -> bytes:
    """One whole message: header (length, op, flags or status, request id), then fields."""
    body = b"".join(fields)
    return _pack_header(MSG_HEADER_REST + len(body), op, flags_or_status, request_id) + body


def message_head(size: int, op: int, flags_or_status: int, request_id: int) -> bytes:
    """The header of a message whose fields are ``size`` bytes (sent in parts after it)."""
    return _pack_header(MSG_HEADER_REST + size, op, flags_or_status, request_id)


def pack_frame(messages: Iterable[Buffer]) -> bytes:
    """Join messages (or message parts) into one length-prefixed frame (one copy)."""
    parts = list(messages)
    return b"".join([_pack_length(sum(map(len, parts))), *parts])
