"""The bookie server: request handling, journal replay and checkpoints, BP-46 protection,
cookies, garbage collection, read-only mode, and the service that runs it all.

Nothing here imports the client library (:mod:`bkframe.client`); what needs both
sides lives in :mod:`bkframe.replication`.
"""
