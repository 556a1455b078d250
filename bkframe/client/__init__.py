"""The client library: create, open, recover, read and write ledgers.

It talks to bookies through :mod:`bkframe.proto` only and never imports the bookie
(:mod:`bkframe.bookie`). ``import bkframe`` re-exports its public names.
"""
