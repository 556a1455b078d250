"""The wire protocol's encoding, shared part: frames and message headers (see :mod:`.messages`
for what the codes mean, ``docs/protocol.md`` for every byte). The bytes of each message are
in :mod:`.request_codec` (requests: what clients send, what bookies parse) and
:mod:`.response_codec` (responses: what bookies send, what clients parse).
"""

from __future__ import annotations

from collections.abc import Iterable

from bkframe.core.interfaces import Buffer
from bkframe.proto.messages import FRAME_HEADER, MSG_HEADER, Op


def pack_message(op: Op, flags_or_status: int, request_id: int, *fields: Buffer) -> bytes:
    """One whole message: header (length, op, flags or status, request id), then fields."""
    body = b"".join(fields)
    return MSG_HEADER.pack(MSG_HEADER.size - 4 + len(body), op, flags_or_status, request_id) + body


def frame(messages: Iterable[Buffer]) -> bytes:
    """Join messages (or message parts) into one length-prefixed frame (one copy)."""
    parts = list(messages)
    return b"".join([FRAME_HEADER.pack(sum(map(len, parts))), *parts])


__all__ = ["frame"]
