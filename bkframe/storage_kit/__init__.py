"""The storage kit: helpers for storage-plugin authors (journals, ledger storages, entry-log
managers), shared by the built-in ones and theirs to use (docs/plugins.md lists them).

None is a contract -- a plugin may do its own -- but each keeps a rule that is easy to get
wrong: the order of a durable update (fsync), surviving a full disk (disk_full,
mapped_file) or a full file table (open_files), one process per directory
(directory_lock), a long loop that lets the event loop breathe (pacing), and the file
handling of an entry log (entry_log_files).
"""
