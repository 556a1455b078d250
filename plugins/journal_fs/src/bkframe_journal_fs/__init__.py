"""The filesystem journal (``[journal] plugin = "journal_fs"``, the default): records in
preallocated files, group commit with one fdatasync per group, replay after a crash, one
journal per directory or several (multi_journal). The plugin module registers it.
"""
