"""Tiered storage: a log's closed segments as Parquet objects in an object-store tier.

A closed segment never changes, so it can leave the bookies: it is written once as a
Parquet object in a *tier* (:class:`bkframe.core.interfaces.tier.Tier`, a plugin: a directory, S3, ...),
checked against the ledger it copies, and then read with ranged reads -- the footer, then
only the row groups a read needs -- by the client and by query engines (Spark, DuckDB,
Polars) that read Parquet themselves. docs/tiered-storage.md describes it for users.

This package holds the object side of it, one concept a module:

- :mod:`~bkframe.client.tiering.keys`: where a segment's object lives in a tier (its key).
- :mod:`~bkframe.client.tiering.object_format`: the object's columns, row groups,
  statistics and footer metadata, and its checksum over the segment's entries.
- :mod:`~bkframe.client.tiering.async_tier`: a tier called from the event loop: worker threads, a
  limiter, a deadline per call.
- :mod:`~bkframe.client.tiering.ranged_file`: a read-only file over byte ranges of an
  object, which pyarrow reads through.
- :mod:`~bkframe.client.tiering.footer`: an object's footer read by ranged gets, and what
  it says: which row group holds an entry or a time, and where its bytes are.
- :mod:`~bkframe.client.tiering.segment_writer`: a closed segment (its ledger, read in
  bounded ranges) written as an object and put in a tier.
- :mod:`~bkframe.client.tiering.verify`: an object read back and compared with what the
  ledger held, entry by entry.
- :mod:`~bkframe.client.tiering.segment_reader`: entries of an object by entry range or by
  time, as Arrow batches or log entries.

It needs pyarrow (``pip install 'bkframe[arrow]'``); nothing imports it unless it is used.
"""
