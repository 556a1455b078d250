"""The frame buffer, without a socket: frames come out whole and in order however the
bytes are cut, a received chunk of whole frames is not copied, and a frame larger than the
connection may send is refused at its 4-byte header, before any of its body is held."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkframe.bookie.serving.handshake import MAX_FRAME_BEFORE_AUTH
from bkframe.proto.codes import MAX_FRAME_SIZE
from bkframe.proto.frames import FrameBuffer, FrameTooLarge, pack_frame


def drain(frames: FrameBuffer) -> list[bytes]:
    out = []
    while (body := frames.next_frame()) is not None:
        out.append(bytes(body))
    return out


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    cuts=st.lists(st.integers(0, 3000), max_size=12),
    as_bytearray=st.booleans(),
)
def test_frames_come_out_whole_and_in_order_however_the_bytes_are_cut(
    bodies: list[bytes], cuts: list[int], as_bytearray: bool
) -> None:
    stream = b"".join(pack_frame([b]) for b in bodies)
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    frames = FrameBuffer()
    out: list[bytes] = []
    for start, end in itertools.pairwise(points):
        chunk = stream[start:end]
        frames.feed(bytearray(chunk) if as_bytearray else chunk)
        out += drain(frames)
        assert frames.buffered == end - sum(4 + len(b) for b in out)
    assert out == bodies
    assert frames.buffered == 0 and frames.frame_size() == 0 and not frames.has_frame()


def test_a_chunk_of_whole_frames_is_not_copied() -> None:
    chunk = pack_frame([b"first"]) + pack_frame([b"second"])
    frames = FrameBuffer()
    frames.feed(chunk)
    first, second = frames.next_frame(), frames.next_frame()
    assert first is not None and second is not None
    assert (first.obj, second.obj) == (chunk, chunk)  # views of what was received
    assert (bytes(first), bytes(second)) == (b"first", b"second")
    assert frames.next_frame() is None and frames.buffered == 0


def test_a_frame_in_parts_says_how_much_is_missing() -> None:
    whole = pack_frame([b"x" * 1000])
    frames = FrameBuffer()
    frames.feed(whole[:2])
    assert (frames.frame_size(), frames.missing(), frames.has_frame()) == (0, 0, False)  # header not in yet
    frames.feed(whole[2:300])
    assert (frames.frame_size(), frames.missing(), frames.buffered) == (1004, 704, 300)
    assert frames.next_frame() is None and not frames.has_frame()
    frames.feed(whole[300:] + whole[:10])  # the rest, and the start of the next frame
    assert frames.has_frame()
    body = frames.next_frame()
    assert body is not None and bytes(body) == b"x" * 1000
    assert frames.buffered == 10 and frames.frame_size() == 1004


def test_a_frame_over_the_limit_is_refused_at_its_header() -> None:
    frames = FrameBuffer()
    frames.feed(struct.pack("<I", MAX_FRAME_SIZE + 1))  # the header alone: no body sent yet
    assert frames.has_frame()  # (something to act on: the refusal)
    with pytest.raises(FrameTooLarge) as refused:
        frames.next_frame()
    assert (refused.value.length, refused.value.limit) == (MAX_FRAME_SIZE + 1, MAX_FRAME_SIZE)
    # What a reader would read next is bounded too, whatever the header says.
    frames = FrameBuffer()
    frames.feed(struct.pack("<I", 2**32 - 1))
    assert frames.missing() <= 4 + MAX_FRAME_SIZE


def test_before_auth_the_limit_is_lower_and_rises_once_set() -> None:
    frames = FrameBuffer(MAX_FRAME_BEFORE_AUTH)
    frames.feed(pack_frame([b"a" * MAX_FRAME_BEFORE_AUTH]))  # exactly the limit: accepted
    assert frames.next_frame() is not None
    frames.feed(struct.pack("<I", MAX_FRAME_BEFORE_AUTH + 1))
    with pytest.raises(FrameTooLarge) as refused:
        frames.next_frame()
    assert refused.value.limit == MAX_FRAME_BEFORE_AUTH
    frames.max_frame_size = MAX_FRAME_SIZE  # authenticated: the same header is now a frame under way
    assert frames.next_frame() is None and frames.missing() == MAX_FRAME_BEFORE_AUTH + 1
