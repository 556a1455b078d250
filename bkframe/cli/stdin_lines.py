"""``ledger append`` and ``log append``: each stdin line becomes one entry, pipelined, and
what each append returns (an entry id, a position) is printed once it is acknowledged.

Stdin is read a block at a time with ``os.read`` in a thread that a signal abandons: a
terminal's line that never comes must not hold Ctrl-C up, and a raw read holds no lock of
``sys.stdin`` that an abandoned thread would keep at the interpreter's exit. A signal stops
the input there (:func:`bkframe.cli.interrupt.work`); the appends already made are still
acknowledged and printed, so that the caller closes the ledger at the last entry printed."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import click
import trio

from bkframe.cli.interrupt import work
from bkframe.client.entry_format import LIMIT_SOURCE
from bkframe.errors import EntryTooLargeError

#: Bytes one read of stdin asks for.
READ_SIZE = 1 << 16


class Pending(Protocol):
    def wait(self) -> Awaitable[Any]: ...


class StdinLines:
    """Lines of stdin (with their newline; the last one may lack it), read in blocks in a
    thread that cancellation abandons."""

    def __init__(self) -> None:
        try:
            self._read: Callable[[], bytes] = partial(os.read, sys.stdin.fileno(), READ_SIZE)
        except (AttributeError, OSError, ValueError):  # an in-memory stdin (click's CliRunner)
            self._read = partial(sys.stdin.buffer.read1, READ_SIZE)  # type: ignore[union-attr]
        self._buffer = bytearray()
        self._eof = False
        self._limiter = trio.CapacityLimiter(1)

    async def readline(self) -> bytes:
        """The next line, or b"" at the end of the input."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            if self._eof:
                line = bytes(self._buffer)
                self._buffer.clear()
                return line
            block = await trio.to_thread.run_sync(self._read, abandon_on_cancel=True, limiter=self._limiter)
            self._eof = not block
            self._buffer += block


async def append_lines(append: Callable[[bytes], Pending]) -> EntryTooLargeError | None:
    """Append every stdin line (without its newline) and print each acknowledgement in order.

    A line over the maximum entry size ends the input there: the lines before it are
    appended and printed, and the returned error names the line, so that the caller can
    close the ledger or log as at the end of the input before it reports the error. A
    signal ends the input too (only the reads are cancelled, never an append half made)."""
    stdin = StdinLines()
    send, receive = trio.open_memory_channel[Pending](1024)
    refused: EntryTooLargeError | None = None

    async def print_acks() -> None:
        async with receive:  # a failed append ends it: the input loop then stops too
            async for pending in receive:
                click.echo(str(await pending.wait()))
                sys.stdout.flush()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(print_acks)
        async with send:
            number = 0
            with work():
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
                    try:
                        send.send_nowait(pending)
                    except trio.WouldBlock:
                        # Made, so it is printed: the wait for room is no place to stop.
                        with trio.CancelScope(shield=True):
                            try:
                                await send.send(pending)
                            except trio.BrokenResourceError:
                                break  # the printer failed: its error is the one raised
                    except trio.BrokenResourceError:
                        break
    return refused
