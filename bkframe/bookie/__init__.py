"""The bookie server. At the top, the bookie itself: its parts and state (:mod:`.bookie`),
how it answers requests (:mod:`.requests`, :mod:`.adds`, :mod:`.reads`,
:mod:`.ledger_control`, ...) and the service that runs it all (:mod:`.service`). By concern
beside it: :mod:`.startup` (checks and claims before serving), :mod:`.serving` (the network
side), :mod:`.durability` (journal records, replay and checkpoints, BP-46 protection) and
:mod:`.runtime` (garbage collection, read-only mode, loop lag).

Nothing here imports the client library (:mod:`bkframe.client`); what needs both
sides lives in :mod:`bkframe.autorecovery`.
"""
