"""A writer for a test to kill: ``python -m tests.bookie.dying_writer METADATA TYPE...``.

Creates one E3 W3 A2 ledger per ledger type named, prints ``ledger TYPE ID`` for each, then
appends ``payload(ledger_id, entry_id, size=SIZE)`` to all of them, a window of appends in
flight per ledger, printing ``acked ID ENTRY`` for each acknowledged append, until killed.
Its ledgers are left open, their last entries on some bookies only: what recovery closes.
"""

from __future__ import annotations

import sys

import trio

import bkframe
from bkframe.testing.kit import FAST, PASSWORD, payload

SIZE = 1024
WINDOW = 16


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def append_forever(writer: bkframe.WriteHandle) -> None:
    pending = []
    entry = 0
    while True:
        pending.append((entry, writer.append_async(payload(writer.ledger_id, entry, size=SIZE))))
        entry += 1
        if len(pending) >= WINDOW:
            index, append = pending.pop(0)
            assert await append.wait() == index
            say(f"acked {writer.ledger_id} {index}")


async def main(metadata: str, types: list[str]) -> None:
    async with bkframe.open_client(metadata, **FAST) as client:
        writers = []
        for ledger_type in types:
            writer = await client.create_ledger(
                ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=ledger_type, password=PASSWORD
            )
            say(f"ledger {ledger_type} {writer.ledger_id}")
            writers.append(writer)
        async with trio.open_nursery() as nursery:
            for writer in writers:
                nursery.start_soon(append_forever, writer)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2:])
