"""``ledger append`` and ``log append``: each stdin line becomes one entry, pipelined, and
what each append returns (an entry id, a position) is printed once it is acknowledged."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import click
import trio

from bkframe.client.entry_format import LIMIT_SOURCE
from bkframe.errors import EntryTooLargeError


class Pending(Protocol):
    def wait(self) -> Awaitable[Any]: ...


async def append_lines(append: Callable[[bytes], Pending]) -> EntryTooLargeError | None:
    """Append every stdin line (without its newline) and print each acknowledgement in order.

    A line over the maximum entry size ends the input there: the lines before it are
    appended and printed, and the returned error names the line, so that the caller can
    close the ledger or log as at the end of the input before it reports the error."""
    stdin = trio.wrap_file(sys.stdin.buffer)
    send, receive = trio.open_memory_channel[Pending](1024)
    refused: EntryTooLargeError | None = None

    async def print_acks() -> None:
        async for pending in receive:
            click.echo(str(await pending.wait()))
            sys.stdout.flush()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(print_acks)
        async with send:
            number = 0
            while line := await stdin.readline():
                number += 1
                try:
                    pending = append(line.rstrip(b"\n"))
                except EntryTooLargeError as e:
                    refused = EntryTooLargeError(
                        f"stdin line {number} is {e.size} bytes, over the maximum entry of {e.maximum} "
                        f"(max_entry_size less a header; {LIMIT_SOURCE}); split it. The lines before it were appended",
                        e.size,
                        e.maximum,
                    )
                    break
                await send.send(pending)
    return refused
