"""The ``journal_fs`` plugin: registers the journal ``[journal] plugin = "journal_fs"`` picks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bkframe.core import hookimpl
from bkframe.core.registry import ComponentRegistry
from bkframe_journal_fs.config import FsJournalConfig

if TYPE_CHECKING:  # the journal itself (trio) is imported when a bookie makes one, not by every plugin manager
    from bkframe.core.counters import Counters
    from bkframe.core.interfaces.journal import Journal

NAME = "journal_fs"


def make_journal(config: FsJournalConfig, directory: Path, counters: Counters) -> Journal:
    from bkframe_journal_fs.fs_journal import FsJournal
    from bkframe_journal_fs.multi_journal import MultiJournal, check_dirs

    others = [directory / d for d in config.dirs]  # an absolute d stays itself
    check_dirs(directory, others)
    if not others:
        return FsJournal(directory, counters, config)
    return MultiJournal([directory, *others], counters, config)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_journal(
        NAME, make_journal, config=FsJournalConfig, description="files with group commit, preallocation, replay"
    )
