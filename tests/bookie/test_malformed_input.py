"""Malformed frames and random bytes never crash the bookie or another connection: what the
server does with them (answers, closes, serves the good messages of a frame, stays up for
its other connections and its garbage collection). Random messages against the decoders
themselves, without a socket: tests/proto/test_decoder_fuzz.py."""

from __future__ import annotations

import struct
from pathlib import Path

import trio

from bkframe import LedgerMetadata
from bkframe.client.bookies.connection import connect_bookie
from bkframe.core.ledger_keys import key_hash
from bkframe.core.plugin_manager import PluginManager
from bkframe.proto.codes import MAX_FRAME_SIZE, Op, Status
from bkframe.proto.frames import pack_frame
from bkframe.proto.ops.add import encode_add
from bkframe.proto.ops.add_batch import encode_add_batch
from bkframe.proto.ops.list_entries import encode_list_entries
from bkframe.proto.ops.read import encode_read
from bkframe.proto.ops.read_lac import encode_read_lac
from bkframe.proto.ops.sync import encode_sync
from bkframe.proto.ops.write_close import encode_write_close
from bkframe.proto.ops.write_lac import encode_write_lac
from bkframe.proto.table import Response, decode_responses
from bkframe.testing.cluster import make_config, running_bookie
from bkframe.testing.kit import wait_until

KEY = b"k"


async def _probe_healthy(host: str, port: int) -> None:
    """Another connection still gets correct answers from the bookie."""
    with trio.fail_after(10):
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(1, 0, b"keep", master_key=KEY)).status == Status.OK
            assert (await bk.read(1, 0, master_key=KEY)).data == b"keep"


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


async def test_random_bytes_and_oversized_frames(tmp_path: Path) -> None:
    import random

    rng = random.Random(42)
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        for size in (1, 3, 7, 100, 5000, 70000):
            await _send_and_collect(host, port, rng.randbytes(size))
        received = await _send_and_collect(host, port, struct.pack("<I", MAX_FRAME_SIZE + 1) + b"x" * 10)
        (length,) = struct.unpack_from("<I", received)
        (r,) = decode_responses(received[4 : 4 + length])
        assert r.status == Status.BAD_REQUEST and "exceeds the maximum" in r.message
        await _probe_healthy(host, port)


async def test_bad_message_among_good_ones(tmp_path: Path) -> None:
    async with running_bookie(make_config(tmp_path)) as (_, host, port):
        good1 = b"".join(encode_add(1, 5, 0, -1, 0, KEY, b"first"))
        bad = struct.pack("<IBBQ", 10, 77, 0, 2)  # unknown op 77
        good2 = encode_read(3, 5, 0, master_key=KEY)
        received = await _send_and_collect(host, port, pack_frame([good1, bad, good2]))
        responses = {}
        pos = 0
        while pos < len(received):
            (length,) = struct.unpack_from("<I", received, pos)
            for r in decode_responses(received[pos + 4 : pos + 4 + length]):
                responses[r.request_id] = r
            pos += 4 + length
        assert responses[1].status == Status.OK
        assert responses[2].status == Status.BAD_REQUEST and "unknown op code 77" in responses[2].message
        assert responses[3].status == Status.OK and responses[3].data == b"first"


# --- valid headers, extreme field values --------------------------------------------------

U64_MAX = 2**64 - 1
I64_MAX = 2**63 - 1


def _raw(op: Op, rid: int, fields: bytes, flags: int = 0) -> bytes:
    return struct.pack("<IBBQ", 10 + len(fields), op, flags, rid) + fields


def _extreme_messages() -> list[tuple[bytes, set[Status], str]]:
    """(message, acceptable statuses, text a BAD_REQUEST message must hold)."""
    bad = {Status.BAD_REQUEST}
    add = encode_add
    batch = encode_add_batch
    return [
        (b"".join(add(1, 2**63, 0, -1, 0, KEY, b"x")), bad, "ledger id 9223372036854775808 is out of range"),
        (b"".join(add(2, U64_MAX, 0, -1, 0, KEY, b"x")), bad, "out of range"),
        (b"".join(add(3, 7, -2, -1, 0, KEY, b"x")), bad, "negative"),
        (b"".join(add(4, 7, I64_MAX, -1, 0, KEY, b"x")), bad, "entry ids must be in 0.."),
        (b"".join(add(5, 7, 2**31, -1, 0, KEY, b"x")), bad, "entry ids must be in 0.."),
        (b"".join(add(6, 7, 0, -2, 0, KEY, b"x")), bad, "lac -2 is invalid"),
        (b"".join(add(7, 7, 0, -(2**63), 0, KEY, b"x")), bad, "is invalid"),
        (b"".join(add(8, 7, 0, -1, 65535, KEY, b"x")), bad, "unknown ledger type id 65535"),
        (_raw(Op.ADD, 9, struct.pack("<QqqHH", 7, 0, -1, 0, 65535) + b"x" * 8), bad, "master key length 65535"),
        (b"".join(batch(10, 2**63, -1, 0, KEY, [0, 1], [b"a", b"b"])), bad, "out of range"),
        (b"".join(batch(11, 7, -1, 0, KEY, [0, I64_MAX], [b"a", b"b"])), bad, "entry ids must be in 0.."),
        (b"".join(batch(12, 7, -1, 0, KEY, [-2, 0], [b"a", b"b"])), bad, "negative"),
        (b"".join(batch(13, 7, -5, 0, KEY, [0], [b"a"])), bad, "lac -5 is invalid"),
        (_raw(Op.ADD_BATCH, 14, struct.pack("<QqHHI", 7, -1, 0, 1, 2**32 - 1) + b"k"), bad, "does not fit"),
        (
            _raw(Op.ADD_BATCH, 15, struct.pack("<QqHHI", 7, -1, 0, 1, 1) + b"k" + struct.pack("<qI", 0, 2**32 - 1) + b"a"),
            bad,
            "do not add up",
        ),
        (encode_read(16, 2**63, 0, master_key=KEY, fence=True), bad, "out of range"),
        (encode_read(17, U64_MAX, 0, master_key=KEY), bad, "out of range"),
        (encode_read(18, 7, -2, master_key=KEY), bad, "invalid"),
        (encode_read(19, 7, I64_MAX, master_key=KEY), {Status.NO_ENTRY, Status.NO_LEDGER}, ""),
        (encode_read_lac(20, U64_MAX), bad, "out of range"),
        (encode_read_lac(21, 2**63, previous_lac=I64_MAX, timeout_ms=2**32 - 1), bad, "out of range"),
        (encode_sync(22, 2**63), bad, "out of range"),
        (encode_write_lac(23, U64_MAX, 5, KEY), bad, "out of range"),
        (encode_write_lac(24, 7, -2, KEY), bad, "lac -2 is invalid"),
        (encode_write_close(25, 2**63, KEY), bad, "out of range"),
        (encode_list_entries(26, U64_MAX, 0, 10), bad, "out of range"),
        (encode_list_entries(27, 7, 0, I64_MAX), {Status.OK, Status.NO_LEDGER}, ""),
        (encode_list_entries(28, 7, -2, 5), bad, "invalid"),
    ]


GC_STORE = {"gc_interval_s": 0.2}


async def test_extreme_field_values_are_refused_and_the_bookie_stays_up(tmp_path: Path) -> None:
    """An ADD (or a fencing READ) with a ledger id >= 2^63 used to be stored; the next
    garbage collection's metadata lookup then raised OverflowError and took the bookie
    down, at every restart. Every id is checked against what metadata stores hold."""
    import bkframe

    metadata = f"sqlite://{tmp_path / 'metadata.db'}"
    config = make_config(tmp_path / "bookie", metadata=metadata, **GC_STORE)
    async with running_bookie(config) as (service, host, port):
        # Ledger 7 exists (the bookie takes adds only for ledgers the metadata store knows).
        store = PluginManager().metadata_store(metadata)
        try:
            await store.create_ledger(
                LedgerMetadata(7, 1, 1, 1, ((0, ("b",)),), password_hash=key_hash(KEY))  # type: ignore[arg-type]
            )
        finally:
            await store.aclose()

        async def answers(raw: bytes) -> dict[int, Response]:
            received = await _send_and_collect(host, port, raw)
            out = {}
            pos = 0
            while pos + 4 <= len(received):
                (length,) = struct.unpack_from("<I", received, pos)
                out.update((r.request_id, r) for r in decode_responses(received[pos + 4 : pos + 4 + length]))
                pos += 4 + length
            return out

        expected = _extreme_messages()
        # Each message in a frame of its own, then all of them in one frame.
        together = await answers(pack_frame([msg for msg, _, _ in expected]))
        for msg, allowed, text in expected:
            (rid,) = struct.unpack_from("<Q", msg, 6)
            for r in ((await answers(pack_frame([msg])))[rid], together[rid]):
                assert r.status in allowed, r
                assert text in r.message, r
        # Garbage collection runs several times over what was stored: each pass ends
        # well, and the bookie stays up.
        gc = service.gc
        assert gc is not None and service.bookie is not None
        collect, passes = gc.collect, [0]

        async def counted() -> tuple[int, int]:
            result = await collect()
            passes[0] += 1
            return result

        gc.collect = counted  # type: ignore[method-assign]
        await wait_until(lambda: passes[0] >= 3, "three garbage collections", 30)
        assert all(0 <= ledger <= I64_MAX for ledger in service.bookie.storage.ledgers())
        async with bkframe.open_client(metadata) as client:
            writer = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1)
            await writer.append(b"still serving")
            await writer.close()
            reader = await client.open_ledger(writer.ledger_id)
            assert [e.payload for e in await reader.read(0, 0)] == [b"still serving"]
