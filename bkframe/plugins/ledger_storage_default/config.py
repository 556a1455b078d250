"""``[ledger_storage]`` with ``plugin = "default"``: the config class and the defaults it names.

Kept apart from the storage (numpy, trio) so that registering the component -- which every
process that loads the plugin manager does, a one-shot CLI command included -- imports neither.
"""

from __future__ import annotations

import attrs

from bkframe.core.config import at_least, between

#: A sealed entry log whose live bytes are below this fraction of its size is compacted.
DEFAULT_COMPACTION_THRESHOLD = 0.5
#: Entry slots a new ledger's index file starts with.
DEFAULT_INDEX_INITIAL_ENTRIES = 1024
#: Indexes open at once (two file descriptors each): about 512 fds, however many ledgers.
DEFAULT_MAX_OPEN_INDEXES = 256
#: Fewest open indexes a cache may be limited to (see :mod:`.index_cache`).
MIN_OPEN_INDEXES = 2
#: Spare index files kept ready; the thread makes more once fewer than half are left.
DEFAULT_SPARES = 64


@attrs.frozen
class DefaultStorageConfig:
    """``[ledger_storage]`` with ``plugin = "default"``."""

    #: Entry slots a new ledger's index file starts with (it doubles as needed).
    index_initial_entries: int = attrs.field(default=DEFAULT_INDEX_INITIAL_ENTRIES, validator=at_least(1))
    #: Compact sealed entry logs whose live fraction is below this (0 turns compaction off).
    compaction_threshold: float = attrs.field(default=DEFAULT_COMPACTION_THRESHOLD, validator=between(0, 1))
    #: PD_JOURNAL entries at least this long are written once: to the entry log, fsynced
    #: before the ack, with only their location in the journal (0 turns it off).
    large_entry_bytes: int = attrs.field(default=0, validator=at_least(0))
    #: Ledger indexes kept open at once, least recently used closed first (each open index
    #: takes two file descriptors; a bookie holds any number of ledgers within this).
    max_open_indexes: int = attrs.field(default=DEFAULT_MAX_OPEN_INDEXES, validator=at_least(MIN_OPEN_INDEXES))
    #: Index files a worker thread keeps made for new ledgers, so that a ledger's first add
    #: creates no file on the event loop (0: each is made as its first add comes).
    spare_index_files: int = attrs.field(default=DEFAULT_SPARES, validator=at_least(0))
