"""How many connections a bookie keeps open: in all, and from one peer address.

Every connection costs a socket, two tasks and buffers, so a client that opens thousands
must not take them all. A connection beyond ``[limits] max_connections`` or
``max_connections_per_address`` is refused at accept: the server answers one error frame
(plaintext bookies) and closes it. Connections below the caps are never touched.
"""

from __future__ import annotations

import logging

from bkframe.bookie.runtime.throttled_log import ThrottledWarning
from bkframe.core.config import LimitsConfig
from bkframe.core.counters import Counters

log = logging.getLogger("bkframe.server")


class ConnectionCaps:
    def __init__(self, limits: LimitsConfig, counters: Counters) -> None:
        self.limits = limits
        self.counters = counters
        self._by_address: dict[str, int] = {}
        self._refusals = ThrottledWarning(log)

    def admit(self, address: str) -> str | None:
        """Count a new connection from ``address`` (an IP), or return why it is refused."""
        limits = self.limits
        counters = self.counters
        from_address = self._by_address.get(address, 0)
        why = None
        if counters.connections_open >= limits.max_connections:
            why = (
                f"this bookie has {counters.connections_open} connections open, its limit "
                f"([limits] max_connections = {limits.max_connections}); try again later"
            )
        elif from_address >= limits.max_connections_per_address:
            why = (
                f"{address} has {from_address} connections open to this bookie, its limit "
                f"([limits] max_connections_per_address = {limits.max_connections_per_address}); "
                f"close some, or share them"
            )
        if why is not None:
            counters.connections_refused += 1
            self._refusals.warn("refused a connection from %s: %s", address, why)
            return why
        counters.connections_open += 1
        self._by_address[address] = from_address + 1
        return None

    def release(self, address: str) -> None:
        """An admitted connection from ``address`` closed."""
        self.counters.connections_open -= 1
        left = self._by_address[address] - 1
        if left:
            self._by_address[address] = left
        else:
            del self._by_address[address]
