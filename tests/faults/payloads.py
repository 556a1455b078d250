"""What writers write: payloads derived from (seed, writer, ledger, entry), so that any
process can tell the right bytes of an entry from the ledger's custom metadata alone."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

#: Custom metadata keys a fault-suite writer puts on each ledger it creates.
WRITER_KEY = "fault-writer"
SEED_KEY = "fault-seed"
#: "1" on ledgers whose entries are big (4 to 32 KiB: frames cut, partial writes).
BIG_KEY = "fault-big"
PASSWORD = b"fault-suite"


def payload(seed: int, writer: str, ledger_id: int, entry_id: int, big: bool = False) -> bytes:
    """16 to 1036 bytes (``big``: 4 to 32 KiB), different for every (seed, writer, ledger, entry).

    The writer's name is part of it so that two writers handed the same ledger id (a
    metadata bug) would write different bytes, which the checks then see.
    """
    h = hashlib.blake2b(f"{seed}/{writer}/{ledger_id}/{entry_id}".encode(), digest_size=16).digest()
    size = 4096 + h[0] * 112 if big else 16 + h[0] * 4
    return f"{ledger_id}:{entry_id}:{writer}|".encode() + (h * (size // 16 + 1))[:size]


def digest(data: bytes) -> str:
    """The short hash writers and readers record for an entry's payload."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def expected_from_custom(custom: Mapping[str, str], ledger_id: int, entry_id: int) -> bytes | None:
    """The payload an entry must have, from its ledger's custom metadata (None: not ours)."""
    writer = custom.get(WRITER_KEY)
    seed = custom.get(SEED_KEY)
    if writer is None or seed is None:
        return None
    return payload(int(seed), writer, ledger_id, entry_id, custom.get(BIG_KEY) == "1")
