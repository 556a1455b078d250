"""The hook specifications: every way a plugin can extend a bookie.

One marker, one prefix (``bkframe_*``). Factory hooks are ``firstresult``: the plugin
manager calls implementations until one returns something other than ``None``, so a
plugin declines by returning ``None`` (for instance when the config names another
plugin, or a metadata URI has another scheme). Plugins implement hooks with
``@bkframe.hookimpl``. Every hook here is documented in ``docs/plugins.md`` and tested;
``tests/core/test_hookspecs.py`` fails if one is not.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from bkframe.core.counters import Counters
    from bkframe.core.interfaces import DurabilityPolicy, EntryLogManager, Journal, LedgerStorage
    from bkframe.core.metadata import MetadataStore

PROJECT = "bkframe"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(firstresult=True)
def bkframe_journal(
    name: str, config: dict[str, Any], directory: Path, counters: Counters
) -> Journal | None:
    """Make the bookie's journal.

    :param name: the ``plugin`` value of the ``[journal]`` config section.
    :param config: the whole ``[journal]`` section (``plugin`` included); validate it and
        raise :class:`bkframe.core.config.ConfigError` on unknown or bad keys.
    :param directory: the directory the journal owns (created, may hold earlier files).
    :param counters: count ``journal_bytes_written`` and ``journal_fsyncs`` here.
    :return: a :class:`~bkframe.core.interfaces.Journal`, or ``None`` if ``name`` is not
        this plugin's.

    Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def bkframe_entry_log_manager(
    name: str, config: dict[str, Any], directory: Path, counters: Counters
) -> EntryLogManager | None:
    """Make the entry-log manager the ledger storage writes through.

    :param name: the ``plugin`` value of the ``[entry_log_manager]`` section.
    :param config: the whole ``[entry_log_manager]`` section.
    :param directory: the directory entry logs live in.
    :param counters: count ``storage_bytes_written`` and ``storage_fsyncs`` here.
    :return: an :class:`~bkframe.core.interfaces.EntryLogManager`, or ``None`` to decline.

    Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def bkframe_ledger_storage(
    name: str,
    config: dict[str, Any],
    directory: Path,
    entry_logs: EntryLogManager,
    counters: Counters,
) -> LedgerStorage | None:
    """Make the bookie's ledger storage.

    :param name: the ``plugin`` value of the ``[ledger_storage]`` section.
    :param config: the whole ``[ledger_storage]`` section.
    :param directory: the directory the storage owns (index and ledger state).
    :param entry_logs: the entry-log manager made by :func:`bkframe_entry_log_manager`;
        a storage that keeps entries elsewhere may ignore it.
    :param counters: count ``storage_bytes_written`` and ``storage_fsyncs`` here.
    :return: a :class:`~bkframe.core.interfaces.LedgerStorage`, or ``None`` to decline.

    Stops at the first non-None result.
    """


@hookspec
def bkframe_register_ledger_types(register: Callable[[DurabilityPolicy], None]) -> None:
    """Register ledger types (durability policies) by calling ``register(policy)``.

    Called once per plugin manager. A name or wire ``type_id`` registered twice is an
    error naming both. :param register: takes a
    :class:`~bkframe.core.interfaces.DurabilityPolicy`.
    """


@hookspec(firstresult=True)
def bkframe_metadata_store(uri: str) -> MetadataStore | None:
    """Open the metadata store a URI names, for a bookie or a client.

    :param uri: e.g. ``sqlite:///var/lib/bkframe/meta.db``, ``memory://NAME``,
        ``zk://host:2181/root``; answer only the schemes you serve.
    :return: a connected :class:`~bkframe.core.metadata.MetadataStore` (call ``aclose``
        when done), or ``None`` to decline. Raise
        :class:`~bkframe.core.metadata.MetadataError` naming the URI if it is yours but
        cannot be reached or opened.

    Stops at the first non-None result. Called from trio: a store that must connect may
    return an object whose methods connect lazily, but must not block the event loop.
    """
