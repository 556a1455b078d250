"""Compaction by key (docs/compaction.md): a log's latest record per key."""
