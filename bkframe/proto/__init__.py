"""The wire protocol: :mod:`.messages` (op and status codes, flags, limits, requests and
responses as values), :mod:`.codec` (frames and message headers), :mod:`.request_codec` and
:mod:`.response_codec` (the bytes of each request and response). ``docs/protocol.md``
documents every byte.

Callers write ``from bkframe import proto as p`` and use ``p.Status``, ``p.encode_add``
and so on: the package is the protocol, its modules split it by concern, and each one's
``__all__`` says what it gives.
"""

from bkframe.proto.codec import *  # noqa: F403 - the package re-exports its modules' __all__
from bkframe.proto.messages import *  # noqa: F403 - the package re-exports its modules' __all__
from bkframe.proto.request_codec import *  # noqa: F403 - the package re-exports its modules' __all__
from bkframe.proto.response_codec import *  # noqa: F403 - the package re-exports its modules' __all__
