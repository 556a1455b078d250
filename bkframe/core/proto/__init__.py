"""The wire protocol: :mod:`.messages` (op and status codes, flags, limits, requests and
responses as values) and :mod:`.codec` (their bytes). ``docs/protocol.md`` documents every byte.

Callers write ``from bkframe.core import proto as p`` and use ``p.Status``, ``p.encode_add``
and so on: the package is the protocol, its two modules split it for size, and each one's
``__all__`` says what it gives.
"""

from bkframe.core.proto.codec import *  # noqa: F403 - the package re-exports its modules' __all__
from bkframe.core.proto.messages import *  # noqa: F403 - the package re-exports its modules' __all__
