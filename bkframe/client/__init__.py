"""The client library: ledgers (create, open, recover, read, write, close) and the named
logs built on them (:mod:`.logs`); tiered storage, which logs use, is :mod:`bkframe.tiering`.

It talks to bookies through :mod:`bkframe.proto` only and never imports the bookie
(:mod:`bkframe.bookie`). ``import bkframe`` re-exports its public names.
"""
