"""The ``per_ledger`` entry-log manager: ``[entry_log_manager] plugin = "per_ledger"``."""

from __future__ import annotations

from pathlib import Path

import attrs

from bkframe.core import hookimpl
from bkframe.core.config import at_least
from bkframe.core.counters import Counters
from bkframe.core.registry import ComponentRegistry
from bkframe_entrylog_per_ledger.manager import (
    DEFAULT_EXPIRE_AFTER_ACCESS_S,
    DEFAULT_MAX_ACTIVE,
    DEFAULT_MAX_LOG_SIZE,
    DEFAULT_MAX_OPEN_LOGS,
    LOG_HEADER,
    PerLedgerEntryLogManager,
)

NAME = "per_ledger"


@attrs.frozen
class PerLedgerConfig:
    """``[entry_log_manager]`` keys of ``plugin = "per_ledger"``."""

    #: Ledgers with an open (active) log at most; the least recently used is sealed beyond.
    max_active: int = attrs.field(default=DEFAULT_MAX_ACTIVE, validator=at_least(1))
    #: Seconds without an append before a ledger's log is sealed.
    expire_after_access_s: float = attrs.field(default=DEFAULT_EXPIRE_AFTER_ACCESS_S, validator=at_least(0.001))
    #: Bytes a log may grow to before a new one is started.
    max_log_size: int = attrs.field(default=DEFAULT_MAX_LOG_SIZE, validator=at_least(LOG_HEADER.size + 1))
    #: Sealed logs kept open for reads at most; the least recently read is closed.
    max_open_logs: int = attrs.field(default=DEFAULT_MAX_OPEN_LOGS, validator=at_least(1))


def make_manager(config: PerLedgerConfig, directory: Path, counters: Counters) -> PerLedgerEntryLogManager:
    return PerLedgerEntryLogManager(directory, counters, **attrs.asdict(config))


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_entry_log_manager(
        NAME,
        make_manager,
        config=PerLedgerConfig,
        description="one entry log per ledger, sealed on write close (BP-32), expiry or too many open",
    )
