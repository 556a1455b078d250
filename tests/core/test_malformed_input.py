"""Malformed frames and random bytes never crash the bookie or another connection."""

from __future__ import annotations

import struct
from pathlib import Path

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkframe.core import protocol as p
from bkframe.core.bookie_client import connect_bookie
from tests.conftest import make_config, running_bookie

KEY = b"k"

message_header = st.builds(
    lambda length, op, flags, rid, tail: struct.pack("<IBBQ", length, op, flags, rid) + tail,
    st.integers(0, 2**32 - 1),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=64),
)
valid_add = st.builds(
    lambda rid, led, ent, key, data: b"".join(p.encode_add(rid, led, ent, -1, 0, key, data)),
    st.integers(1, 2**64 - 1),
    st.integers(100, 2**64 - 1),
    st.integers(-2, 2**63 - 1),
    st.binary(max_size=80),
    st.binary(max_size=100),
)
mangled_add = st.builds(
    lambda msg, cut, flip: bytes(msg[:cut]) if flip is None else msg[:flip] + bytes([msg[flip % len(msg)] ^ 0x5A]) + msg[flip + 1 :],
    valid_add,
    st.integers(0, 40),
    st.one_of(st.none(), st.integers(0, 30)),
)
mangled_write_lac = st.builds(
    lambda rid, led, lac, key, cut: p.encode_write_lac(rid, led, lac, key)[:cut],
    st.integers(1, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.integers(-3, 2**63 - 1),
    st.binary(max_size=40),
    st.integers(0, 80),
)
body = st.lists(
    st.one_of(message_header, valid_add, mangled_add, mangled_write_lac, st.binary(max_size=50)), max_size=6
).map(b"".join)


async def _probe_healthy(host: str, port: int) -> None:
    """Another connection still gets correct answers from the bookie."""
    with trio.fail_after(10):
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(1, 0, b"keep", master_key=KEY)).status == p.Status.OK
            assert (await bk.read(1, 0)).data == b"keep"


async def _send_and_collect(host: str, port: int, raw: bytes) -> bytes:
    """Send raw bytes, half-close, and read whatever comes back until the bookie closes."""
    stream = await trio.open_tcp_stream(host, port)
    received = bytearray()
    try:
        with trio.move_on_after(2):
            await stream.send_all(raw)
            await stream.send_eof()
            while chunk := await stream.receive_some(65536):
                received += chunk
    except trio.BrokenResourceError:
        pass
    finally:
        await stream.aclose()
    return bytes(received)


def _check_responses(received: bytes) -> None:
    """Whatever the bookie answered is well-formed; errors are BAD_REQUEST."""
    pos = 0
    while pos + 4 <= len(received):
        (length,) = struct.unpack_from("<I", received, pos)
        frame = received[pos + 4 : pos + 4 + length]
        if len(frame) < length:
            break
        for r in p.decode_responses(frame):
            assert r.status in (p.Status.OK, p.Status.BAD_REQUEST, p.Status.NO_LEDGER, p.Status.NO_ENTRY, p.Status.UNAUTHORIZED)
        pos += 4 + length


async def test_hypothesis_frames_never_crash_bookie(tmp_path: Path) -> None:
    async with running_bookie(make_config(tmp_path)) as (service, host, port):
        token = trio.lowlevel.current_trio_token()

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
        @given(body=body, raw_length=st.one_of(st.none(), st.integers(0, 2**32 - 1)))
        def check(body: bytes, raw_length: int | None) -> None:
            length = len(body) if raw_length is None else raw_length
            raw = struct.pack("<I", length) + body
            received = trio.from_thread.run(_send_and_collect, host, port, raw, trio_token=token)
            _check_responses(received)

        await trio.to_thread.run_sync(check)
        await _probe_healthy(host, port)
        assert service.bookie is not None and service.bookie.counters.bad_requests > 0


async def test_random_bytes_and_oversized_frames(tmp_path: Path) -> None:
    import random

    rng = random.Random(42)
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        for size in (1, 3, 7, 100, 5000, 70000):
            await _send_and_collect(host, port, rng.randbytes(size))
        received = await _send_and_collect(host, port, struct.pack("<I", p.MAX_FRAME_SIZE + 1) + b"x" * 10)
        (length,) = struct.unpack_from("<I", received)
        (r,) = p.decode_responses(received[4 : 4 + length])
        assert r.status == p.Status.BAD_REQUEST and "exceeds the maximum" in r.message
        await _probe_healthy(host, port)


async def test_bad_message_among_good_ones(tmp_path: Path) -> None:
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        good1 = b"".join(p.encode_add(1, 5, 0, -1, 0, KEY, b"first"))
        bad = struct.pack("<IBBQ", 10, 77, 0, 2)  # unknown op 77
        good2 = p.encode_read(3, 5, 0)
        received = await _send_and_collect(host, port, p.frame([good1, bad, good2]))
        responses = {}
        pos = 0
        while pos < len(received):
            (length,) = struct.unpack_from("<I", received, pos)
            for r in p.decode_responses(received[pos + 4 : pos + 4 + length]):
                responses[r.request_id] = r
            pos += 4 + length
        assert responses[1].status == p.Status.OK
        assert responses[2].status == p.Status.BAD_REQUEST and "unknown op code 77" in responses[2].message
        assert responses[3].status == p.Status.OK and responses[3].data == b"first"
