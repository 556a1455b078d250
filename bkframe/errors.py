"""Every error bkframe raises on purpose, under one root (:class:`BKError`).

The classes are defined in :mod:`bkframe.core.errors` (a plugin raises them too); this
module is where users import them from: ``from bkframe.errors import NoSuchLedgerError``
or ``bkframe.NoSuchLedgerError``.
"""

from __future__ import annotations

from bkframe.core.errors import *  # noqa: F403 - the same names, one definition
from bkframe.core.errors import __all__ as __all__
