"""A client on a simulated host, driven by the test: ``python -m tests.partitions.agent URI``.

It reads one JSON command per line on stdin and writes one JSON event per line on stdout
(each with the command's ``id`` where it answers one). Appends run in the background and
report every acknowledgement as it comes, so the test knows exactly what was acknowledged
before, during and after a partition:

``{"op": "create", "e": 3, "w": 3, "a": 2}``        -> ``{"ledger": L, "ensemble": [...]}``
``{"op": "append", "ledger": L, "window": 8}``       -> ``{"ack": [L, entry]}`` per entry, until
    stopped or failed (``{"failed": L, "error": TYPE, "message": ...}``); payloads are
    ``payload(L, entry)`` (bkframe.testing.kit), so the test checks every byte it reads back
``{"op": "stop", "ledger": L}``                      -> ``{"stopped": L, "acked": N}``
``{"op": "close", "ledger": L}``                     -> ``{"closed": L, "last": E}``
``{"op": "metadata", "ledger": L}``                  -> ``{"fragments": [[first, [bookies]], ...]}``
``{"op": "log_append", "log": NAME, "window": 4}``   -> ``{"log_ack": [NAME, "S:E"]}`` per entry;
    payloads ``payload(NAME, n)`` for the n-th append of this agent to the log
``{"op": "tail", "ledger": L}``                      -> ``{"tailed": [L, entry]}`` per entry read
    (payload checked here: ``{"tail_error": ...}`` if it differs)
``{"op": "exit"}``

Every client call has the client's own request timeouts (FAST), nothing waits forever.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import trio

import bkframe
from bkframe.testing.kit import FAST, PASSWORD, payload


class Agent:
    def __init__(self, client: bkframe.Client) -> None:
        self.client = client
        self.writers: dict[int, bkframe.WriteHandle] = {}
        self.acked: dict[int, int] = {}
        self.stops: dict[int, trio.CancelScope] = {}
        self.log_writers: dict[str, bkframe.LogWriter] = {}

    def emit(self, **event: Any) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    async def handle(self, cmd: dict[str, Any], nursery: trio.Nursery) -> None:
        op, cid = cmd["op"], cmd.get("id")
        try:
            if op == "create":
                w = await self.client.create_ledger(
                    ensemble=cmd.get("e", 3), write_quorum=cmd.get("w", 3), ack_quorum=cmd.get("a", 2),
                    ledger_type=cmd.get("type", "PD_JOURNAL"), password=PASSWORD,
                )
                self.writers[w.ledger_id] = w
                self.emit(id=cid, ledger=w.ledger_id, ensemble=list(w.metadata.fragments[-1][1]))
            elif op == "append":
                scope = trio.CancelScope()
                self.stops[cmd["ledger"]] = scope
                nursery.start_soon(self.append, cmd["ledger"], cmd.get("window", 8), scope)
                self.emit(id=cid, appending=cmd["ledger"])
            elif op == "stop":
                self.stops.pop(cmd["ledger"]).cancel()
                await trio.sleep(0)
                self.emit(id=cid, stopped=cmd["ledger"], acked=self.acked.get(cmd["ledger"], 0))
            elif op == "close":
                md = await self.writers[cmd["ledger"]].close()
                self.emit(id=cid, closed=cmd["ledger"], last=md.last_entry_id)
            elif op == "metadata":
                md = self.writers[cmd["ledger"]].metadata
                self.emit(id=cid, fragments=[[first, list(bookies)] for first, bookies in md.fragments])
            elif op == "log_append":
                nursery.start_soon(self.log_append, cmd["log"], cmd.get("window", 4))
                self.emit(id=cid, log_appending=cmd["log"])
            elif op == "tail":
                nursery.start_soon(self.tail, cmd["ledger"])
                self.emit(id=cid, tailing=cmd["ledger"])
            elif op == "exit":
                nursery.cancel_scope.cancel()
            else:
                self.emit(id=cid, error="ValueError", message=f"unknown op {op!r}")
        except bkframe.BKError as e:
            self.emit(id=cid, error=type(e).__name__, message=str(e))

    async def append(self, ledger_id: int, window: int, scope: trio.CancelScope) -> None:
        writer = self.writers[ledger_id]
        entry = writer.lap + 1
        pending: list[tuple[int, Any]] = []
        with scope:
            try:
                while True:
                    pending.append((entry, writer.append_async(payload(ledger_id, entry))))
                    entry += 1
                    if len(pending) >= window:
                        wanted, pa = pending.pop(0)
                        got = await pa.wait()
                        assert got == wanted, (got, wanted)
                        self.acked[ledger_id] = got + 1
                        self.emit(ack=[ledger_id, got])
                    else:
                        await trio.sleep(0)
            except bkframe.BKError as e:
                self.emit(failed=ledger_id, error=type(e).__name__, message=str(e))

    async def log_append(self, name: str, window: int) -> None:
        try:
            if name not in self.log_writers:
                self.log_writers[name] = await self.client.logs.open_writer(name, password=PASSWORD)
            writer = self.log_writers[name]
            n = 0
            pending: list[Any] = []
            while True:
                pending.append(writer.append_async(payload(name, os.getpid(), n)))
                n += 1
                if len(pending) >= window:
                    position = await pending.pop(0).wait()
                    self.emit(log_ack=[name, str(position), os.getpid(), n - window])
                else:
                    await trio.sleep(0)
        except bkframe.BKError as e:
            self.emit(log_failed=name, error=type(e).__name__, message=str(e))

    async def tail(self, ledger_id: int) -> None:
        try:
            reader = await self.client.open_ledger(ledger_id, password=PASSWORD, recovery=False)
            async for entry in reader.tail(0, poll_timeout_s=0.5):
                if entry.payload != payload(ledger_id, entry.entry_id):
                    self.emit(tail_error=[ledger_id, entry.entry_id])
                self.emit(tailed=[ledger_id, entry.entry_id])
            self.emit(tail_ended=ledger_id)
        except bkframe.BKError as e:
            self.emit(tail_failed=ledger_id, error=type(e).__name__, message=str(e))


async def main(uri: str) -> None:
    async with bkframe.open_client(uri, **FAST) as client:
        agent = Agent(client)
        agent.emit(ready=os.getpid())
        stdin = trio.lowlevel.FdStream(os.dup(0))
        buffer = b""
        async with trio.open_nursery() as nursery:
            while True:
                data = await stdin.receive_some(65536)
                if not data:
                    nursery.cancel_scope.cancel()
                    return
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        nursery.start_soon(agent.handle, json.loads(line), nursery)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
