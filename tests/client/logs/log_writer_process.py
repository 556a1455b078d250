"""A log writer run as its own process by tests: appends forever, prints each acked position.

Usage: python log_writer_process.py METADATA_URI LOG   (prints "open" once it is the writer,
then "POSITION PAYLOAD" per acknowledged append, in order)
"""

from __future__ import annotations

import sys

import trio

import bkframe


async def main(uri: str, name: str) -> None:
    async with bkframe.open_client(uri) as client:
        writer = await bkframe.Logs(client).open_writer(name)
        print("open", flush=True)
        entry = 0
        pending = []
        while True:
            payload = b"entry-%d" % entry
            pending.append((payload, writer.append_async(payload)))
            entry += 1
            if len(pending) >= 16:
                payload, first = pending.pop(0)
                print(await first.wait(), payload.decode(), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
