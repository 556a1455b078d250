"""An asyncio consumer on bkframe: reads a log on a durable cursor, processes each record, acks.

Started again after it stopped -- cleanly or killed -- it resumes after its cursor's last
stored ack: every record is processed at least once, none is skipped. The cursor is
stored at most once per second (the client's ``cursor_flush_interval_s``), so a consumer
killed with SIGKILL processes again the records it acked in its last second; one stopped
with SIGTERM or Ctrl-C finishes the record in hand, stores its cursor and exits 0, and the
next run starts right after the last record it processed (no record twice).

Run it::

    python examples/consumer.py --metadata sqlite:///path/to/metadata.db --log web-events --cursor billing

It prints each record it processes (``POSITION<TAB>KEY<TAB>VALUE``) to stdout: replace
:func:`process` with the work your consumer does (a database write, an HTTP call). The
cursor is made at the log's start (``--start latest``: only new records) the first time,
and shows in ``bkframe log cursors LOG`` with its lag.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

import bkframe


async def process(entry: bkframe.LogEntry, delay_s: float) -> None:
    """The consumer's work on one record; here, one line on stdout."""
    if delay_s:
        await asyncio.sleep(delay_s)  # stands for real work: a slow consumer
    key = entry.key.decode(errors="replace") if entry.key is not None else ""
    print(f"{entry.position}\t{key}\t{entry.payload.decode(errors='replace')}", flush=True)


class Consumer:
    """Tails ``log`` from ``cursor``'s position, processing and acking record by record.

    :meth:`stop` ends it between two records: it interrupts only a wait for new records,
    never :func:`process`, so each record processed has been acked when :meth:`run` returns.
    """

    def __init__(self, logs: bkframe.Logs, log: str, cursor: str, *, password: bytes, delay_s: float) -> None:
        self.logs, self.log, self.cursor = logs, log, cursor
        self.password, self.delay_s = password, delay_s
        self._stopping = False
        self._waiting = False
        self._task: asyncio.Task[object] | None = None

    def stop(self) -> None:
        self._stopping = True
        if self._waiting and self._task is not None:
            self._task.cancel()

    async def run(self, start: bkframe.Position | str) -> bkframe.Position:
        """Consume until :meth:`stop`; returns the position to resume at (the cursor's, once stored)."""
        self._task = asyncio.current_task()
        try:
            await self.logs.create_cursor(self.log, self.cursor, start, password=self.password)
        except bkframe.CursorExistsError:
            pass  # a run before this one made it: resume where it acked
        position = (await self.logs.cursor(self.log, self.cursor)).position
        print(f"consuming log {self.log!r} from {position} (cursor {self.cursor!r})", file=sys.stderr, flush=True)
        reader = await self.logs.reader(self.log, password=self.password)
        # aclosing: the tail's reads end with the loop, not whenever the generator is collected.
        async with contextlib.aclosing(reader.tail_chunks(position)) as chunks:
            while not self._stopping:
                self._waiting = True
                try:
                    chunk = await anext(chunks)
                except asyncio.CancelledError:
                    if not self._stopping:
                        raise
                    self._task.uncancel()  # our own stop, not the caller's cancellation
                    break
                finally:
                    self._waiting = False
                for entry in chunk:
                    await process(entry, self.delay_s)
                    # In memory; the client stores it within its flush interval.
                    await self.logs.ack(self.log, self.cursor, entry.position)
                    position = entry.position.next()
                    if self._stopping:
                        break
        return position


async def consume(args: argparse.Namespace) -> None:
    async with bkframe.open_client(args.metadata) as client:
        consumer = Consumer(
            client.logs, args.log, args.cursor, password=os.environ.get("BKFRAME_PASSWORD", "").encode(),
            delay_s=args.delay_ms / 1000,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, consumer.stop)
        resume = await consumer.run(bkframe.parse_where(args.start))
        # The client would store the acks as it closes; done here to say where it stopped.
        await client.logs.flush_cursors(args.log, args.cursor)
        stored = (await client.logs.cursor(args.log, args.cursor)).position
        print(f"stopped: cursor {args.cursor!r} of log {args.log!r} stored at {stored} (resume at {resume})",
              file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--metadata", default=os.environ.get("BKFRAME_METADATA"),
                        help="the cluster's metadata store URI (default: $BKFRAME_METADATA)")
    parser.add_argument("--log", required=True)
    parser.add_argument("--cursor", required=True, help="the durable cursor's name (made on the first run)")
    parser.add_argument("--start", default="earliest", help="where a new cursor starts: earliest, latest or POS")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="work per record, simulated (ms)")
    args = parser.parse_args()
    if not args.metadata:
        parser.error("give --metadata URI or set $BKFRAME_METADATA")
    try:
        asyncio.run(consume(args))
    except bkframe.BKError as e:
        sys.exit(f"consumer: {e}")


if __name__ == "__main__":
    main()
