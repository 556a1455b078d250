"""A writer run as its own process by tests: appends forever, prints each acked entry id.

Usage: python writer_process.py METADATA_URI E W A   (first line printed: the ledger id)
"""

from __future__ import annotations

import sys

import trio

import bkframe
from bkframe.testing.kit import PASSWORD, payload


async def main(uri: str, e: int, w: int, a: int) -> None:
    async with bkframe.open_client(uri) as client:
        writer = await client.create_ledger(ensemble=e, write_quorum=w, ack_quorum=a, password=PASSWORD)
        print(writer.ledger_id, flush=True)
        entry = 0
        pending = []
        while True:
            pending.append(writer.append_async(payload("entry", entry)))
            entry += 1
            if len(pending) >= 16:
                acked = await pending.pop(0).wait()
                print(acked, flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], *map(int, sys.argv[2:5]))
