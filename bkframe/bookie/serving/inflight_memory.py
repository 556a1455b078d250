"""The memory a bookie may spend on requests in flight, and who waits when it is spent.

``[limits] max_inflight_bytes`` bounds the bytes of request frames read (or being read)
and not answered yet, with their queued answers, over all connections; the connections
from one peer address may hold ``max_inflight_bytes_per_address`` of it. A connection's
reader takes a frame's whole size as soon as it has read its 4-byte header, before it
buffers the body (:meth:`InflightMemory.take`), and its answers give it back once they are
sent (:meth:`InflightMemory.release`). When there is no room, the reader waits: the client
sees backpressure (TCP), never an error, and never an unbounded buffer.

No deadlock: a reader never waits while it holds memory (it gives back what it holds for
its buffer first), answers are sent without taking any, and a frame larger than the
budget (or an address's share) is read alone, once nothing else is held. Waiters are
served in order, except that one waiting for its address's share never holds up the
others (a flood from one address does not stop the rest).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import attrs
import trio

from bkframe.core.counters import Counters


@attrs.define(eq=False)
class _Waiter:
    address: str
    size: int
    granted: trio.Event = attrs.Factory(trio.Event)


class InflightMemory:
    def __init__(self, capacity: int, per_address: int, counters: Counters) -> None:
        self.capacity = capacity
        self.per_address = per_address
        self.counters = counters
        self.used = 0
        self._by_address: dict[str, int] = {}
        self._waiting: list[_Waiter] = []
        #: The first waiter waits for room in the whole budget: later ones queue behind it.
        self._blocked = False

    def _fits(self, address: str, size: int) -> tuple[bool, bool]:
        """(fits the whole budget, fits the address's share); either fits when empty."""
        held = self._by_address.get(address, 0)
        return (
            self.used + size <= self.capacity or self.used == 0,
            held + size <= self.per_address or held == 0,
        )

    def _add(self, address: str, size: int) -> None:
        self.used += size
        self.counters.inflight_bytes = self.used
        self._by_address[address] = self._by_address.get(address, 0) + size

    def try_take(self, address: str, size: int) -> bool:
        """Take ``size`` bytes for ``address`` if there is room now and nobody waits before it."""
        if not self.has_room(address, size):
            return False
        self._add(address, size)
        return True

    def has_room(self, address: str, size: int) -> bool:
        """Whether :meth:`try_take` would take ``size`` bytes for ``address`` now."""
        if self._blocked:
            return False
        whole, share = self._fits(address, size)
        return whole and share

    async def take(self, address: str, size: int) -> None:
        """Take ``size`` bytes for ``address``, waiting for room (the caller must hold none)."""
        if self.try_take(address, size):
            return
        waiter = _Waiter(address, size)
        self._waiting.append(waiter)
        self._grant()
        try:
            await waiter.granted.wait()
        except BaseException:
            if waiter.granted.is_set():
                self.release(address, size)
            else:
                self._waiting.remove(waiter)
                self._grant()
            raise

    def charge(self, address: str, size: int) -> None:
        """Count ``size`` more bytes for ``address`` without waiting (answers, a read's overrun)."""
        if size:
            self._add(address, size)

    def release(self, address: str, size: int) -> None:
        """Give back ``size`` bytes that ``address`` held."""
        if not size:
            return
        self.used -= size
        self.counters.inflight_bytes = self.used
        left = self._by_address[address] - size
        if left:
            self._by_address[address] = left
        else:
            del self._by_address[address]
        if self._waiting:
            self._grant()

    def _grant(self) -> None:
        """Wake the waiters that fit now, in order; one that needs room in the whole budget
        stops the scan (it is served first), one whose address holds its share is passed."""
        self._blocked = False
        for waiter in list(self._waiting):
            whole, share = self._fits(waiter.address, waiter.size)
            if not share:
                continue  # its address holds its share: others go on
            if not whole:
                self._blocked = True
                return
            self._waiting.remove(waiter)
            self._add(waiter.address, waiter.size)
            waiter.granted.set()


class ConnectionMemory:
    """What one connection holds of the budget, given back whole when it ends (:meth:`close`):
    its reader's buffer, its frames and their answers."""

    def __init__(self, memory: InflightMemory, address: str) -> None:
        self.memory = memory
        #: The peer's address (IP): its connections share its part of the budget.
        self.address = address
        self.held = 0
        self._closed = False

    def charge(self, size: int) -> None:
        """Count ``size`` more bytes without waiting (answers made, bytes read past a frame)."""
        if not self._closed:
            self.memory.charge(self.address, size)
            self.held += size

    def release(self, size: int) -> None:
        if not self._closed:
            self.memory.release(self.address, size)
            self.held -= size

    async def reserve(self, holding: int, want: int) -> int:
        """Hold ``want`` bytes for the reader, which holds ``holding``; returns what it holds."""
        if self.memory.try_take(self.address, want - holding):
            self.held += want - holding
            return want
        # Never wait while holding: another reader's frame may need what this one holds.
        self.release(holding)
        await self.memory.take(self.address, want)
        self.held += want
        return want

    async def wait_for_room(self, holding: int, size: int) -> int:
        """Wait until ``size`` bytes would fit (taking none); returns what the reader, which
        held ``holding``, holds after (nothing if it had to wait)."""
        memory = self.memory
        if memory.has_room(self.address, size):
            return holding
        self.release(holding)
        await memory.take(self.address, size)
        memory.release(self.address, size)
        return 0

    def close(self) -> None:
        """The connection ended: give back what it still holds; later releases are no-ops."""
        self.memory.release(self.address, self.held)
        self.held = 0
        self._closed = True


class FrameMemory:
    """A frame's bytes of the budget, given back once every answer made from it is sent:
    its batches' (with their own bytes) and its deferred answers' (which keep its requests).
    The reader holds it while it serves the frame (:meth:`done` when it is through)."""

    def __init__(self, connection: ConnectionMemory, size: int) -> None:
        self.connection = connection
        self.size = size
        self._holders = 1

    def hold(self, answer_size: int = 0) -> Callable[[], None]:
        """One more holder; call what this returns once its answers (``answer_size`` bytes,
        already charged) are sent."""
        self._holders += 1
        return partial(self._answered, answer_size)

    def _answered(self, answer_size: int) -> None:
        self.connection.release(answer_size)
        self.done()

    def done(self) -> None:
        self._holders -= 1
        if not self._holders:
            self.connection.release(self.size)
