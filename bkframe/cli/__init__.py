"""The ``bkframe`` command line: one module per command group (see :mod:`.main`)."""
