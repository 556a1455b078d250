"""The ``[journal]`` keys of ``journal_fs`` (conf/bookie.toml says what each does): one value
the plugin validates and every journal of it (one directory or several) is made with."""

from __future__ import annotations

import attrs

from bkframe.core.config import at_least, directory_field


@attrs.frozen
class FsJournalConfig:
    """``[journal]`` keys (see conf/bookie.toml for what each does)."""

    #: A group waits at most this long for more records before its fsync...
    max_wait_ms: float = attrs.field(default=1.0, validator=at_least(0))
    #: ...or is flushed at once when this many bytes are buffered...
    buffered_bytes_threshold: int = attrs.field(default=512 * 1024, validator=at_least(0))
    #: ...or as soon as no more appends are arriving.
    flush_when_queue_empty: bool = True
    #: With it, a group nobody waits for yet (VD entries, acknowledged before their fsync)
    #: first waits at most this long for a waiter or more records.
    max_lazy_wait_ms: float = attrs.field(default=5.0, validator=at_least(0))
    #: Files are extended ahead of the write position in chunks of this size.
    preallocate_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=at_least(0))
    #: A new file is started once the current one is larger than this.
    max_file_size: int = attrs.field(default=256 * 1024 * 1024, validator=at_least(4096))
    #: fsync each group (off only for benchmarks: acknowledged adds could be lost).
    fsync: bool = True
    #: More journal directories (absolute, or relative to the bookie's journal directory,
    #: which is always the first), each with its own writer; ledgers are spread by id.
    #: Declared as directories: the bookie locks each before the journal is made.
    dirs: tuple[str, ...] = directory_field(())
    #: After each fsync, drop the synced pages from the page cache (read only at replay).
    drop_synced_pages: bool = False
