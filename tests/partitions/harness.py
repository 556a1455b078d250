"""The test's side of the partition scenarios: clients on simulated hosts (agents) and a
check that reads back, byte for byte, everything they were acknowledged."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bkframe
from bkframe.testing.faults.hosts import Host
from bkframe.testing.kit import PASSWORD, payload

ROOT = Path(__file__).resolve().parents[2]


class Agent:
    """A client process on ``host`` (``tests/partitions/agent.py``), driven by JSON lines."""

    def __init__(self, host: Host, metadata: str, log_path: Path) -> None:
        self.host = host
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = host.popen(
            [sys.executable, "-m", "tests.partitions.agent", metadata],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, cwd=ROOT, text=True, bufsize=1,
        )
        self.events: list[dict[str, Any]] = []
        #: Ledger -> the entry ids acknowledged, in order (kept apart: there may be many).
        self._acks: dict[int, list[int]] = {}
        self._changed = threading.Condition()
        self._next_id = 0
        threading.Thread(target=self._read, name=f"agent-{host.name}", daemon=True).start()
        self.wait_for(lambda e: "ready" in e, 60, "the agent to start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            with self._changed:
                if "ack" in event:
                    self._acks.setdefault(event["ack"][0], []).append(event["ack"][1])
                else:
                    self.events.append(event)
                self._changed.notify_all()
        with self._changed:
            self.events.append({"exited": self.proc.poll()})
            self._changed.notify_all()

    def wait_for(self, match: Callable[[dict[str, Any]], bool], timeout_s: float, what: str) -> dict[str, Any]:
        """The first event (acknowledgements aside) that ``match`` accepts."""
        return self._wait(lambda seen: next((e for e in self.events[seen:] if match(e)), None), timeout_s, what)

    def _wait(self, found: Callable[[int], dict[str, Any] | None], timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            seen = 0
            while True:
                hit = found(seen)
                if hit is not None:
                    return hit
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0 or any("exited" in e for e in self.events):
                    tail = self.log_path.read_text(errors="replace")[-3000:]
                    raise AssertionError(
                        f"waited {timeout_s} s for {what} on {self.host}; events {self.events[-10:]}; log:\n{tail}"
                    )
                self._changed.wait(left)

    def request(self, op: str, timeout_s: float = 60.0, **args: Any) -> dict[str, Any]:
        """Send a command, wait for its answer; an answer with ``error`` raises."""
        self._next_id += 1
        cid = self._next_id
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "id": cid, **args}) + "\n")
        self.proc.stdin.flush()
        answer = self.wait_for(lambda e: e.get("id") == cid, timeout_s, f"the answer to {op}")
        if "error" in answer:
            raise AssertionError(f"{op} on {self.host}: {answer['error']}: {answer['message']}")
        return answer

    def acked(self, ledger_id: int) -> list[int]:
        with self._changed:
            return list(self._acks.get(ledger_id, []))

    def wait_acks(self, ledger_id: int, count: int, timeout_s: float = 60.0) -> None:
        """Wait for ``count`` more acknowledgements of the ledger."""
        with self._changed:
            want = len(self._acks.get(ledger_id, [])) + count

        def enough(seen: int) -> dict[str, Any] | None:
            return {} if len(self._acks.get(ledger_id, [])) >= want else None

        self._wait(enough, timeout_s, f"{count} more acks of {ledger_id}")

    def event(self, key: str) -> list[dict[str, Any]]:
        with self._changed:
            return [e for e in self.events if key in e]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._log.close()


async def check_ledger(client: bkframe.Client, ledger_id: int, acked: list[int]) -> int:
    """Open (recover if needed) the ledger: every acknowledged entry is there, byte for byte,
    and so is every entry up to its end. Returns the last entry id."""
    reader = await client.open_ledger(ledger_id, password=PASSWORD, recovery=True)
    last = reader.lac
    assert not acked or max(acked) <= last, f"ledger {ledger_id}: acknowledged up to {max(acked)}, but it ends at {last}"
    if last >= 0:
        entries = await reader.read(0, last)
        wrong = [e.entry_id for e in entries if e.payload != payload(ledger_id, e.entry_id)]
        assert not wrong and [e.entry_id for e in entries] == list(range(last + 1)), (ledger_id, wrong[:10])
    return last
