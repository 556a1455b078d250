"""A peer that resets its connection is routine for a bookie: no traceback in its log."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

from bkframe.client.bookies.connection import connect_bookie
from bkframe.proto.frames import pack_frame
from bkframe.proto.ops.bookie_info import encode_bookie_info
from bkframe.testing.cluster import BookieProcess
from bkframe.testing.kit import wait_until


async def test_peer_reset_is_not_logged_as_a_failure(tmp_path: Path, bookie_processes: list[Any]) -> None:
    bookie = BookieProcess(tmp_path / "b").start()
    bookie_processes.append(bookie)
    for _ in range(5):
        sock = socket.create_connection((bookie.host, bookie.port))
        # Half a frame, then a reset (SO_LINGER 0 makes close() send RST).
        sock.sendall(struct.pack("<I", 100) + b"x" * 10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    # Resets while the bookie has a response to send, too.
    for _ in range(5):
        sock = socket.create_connection((bookie.host, bookie.port))
        sock.sendall(pack_frame([encode_bookie_info(1)]) * 50)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    async with connect_bookie(bookie.host, bookie.port) as conn:  # still serving
        assert (await conn.info(timeout_s=10))["bookie_id"]

        async def resets_handled() -> bool:  # every reset connection closed: only this one is open
            return (await conn.info(timeout_s=10))["counters"]["connections_open"] == 1

        await wait_until(resets_handled, "the bookie to close the reset connections", 30)
    log = bookie.log_path.read_text()
    assert "Traceback" not in log and "connection failed" not in log, log[-3000:]
