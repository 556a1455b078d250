"""One module per operation: its request and response classes, and the functions that
turn each into bytes and back. :mod:`bkframe.proto.table` lists them by op code; adding an
operation is a module here, a row there, and its handler in the bookie's table
(:mod:`bkframe.bookie.requests`): ``docs/protocol.md``, "Adding an operation", which
documents every byte.
"""
