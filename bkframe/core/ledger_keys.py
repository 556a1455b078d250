"""What a ledger's password becomes: the master key bookies check, the hash metadata keeps.

The password itself is never stored or sent. The master key (sent with every add and
fence) is derived from it, and the hash in the ledger's metadata is derived from the
master key, so a bookie that holds only the metadata can check a master key it is shown
(after losing its disk, say) without ever learning the password.
"""

from __future__ import annotations

import hashlib
import hmac


def master_key(password: bytes) -> bytes:
    """The key bookies compare on every add and fence (never the password itself)."""
    return hashlib.sha256(b"bkframe-master-key:" + password).digest()[:20]


def keys_equal(a: bytes, b: bytes) -> bool:
    """Whether two master keys are equal, in time that says nothing of where they differ."""
    return hmac.compare_digest(a, b)


def key_hash(key: bytes) -> str:
    """The metadata's ``password_hash`` of a ledger whose master key is ``key``."""
    return hashlib.sha256(b"bkframe-ledger-password:" + key).hexdigest()


def password_hash(password: bytes) -> str:
    """What metadata keeps of a ledger's password (never the password itself)."""
    return key_hash(master_key(password))


def key_matches(key: bytes, stored_hash: str) -> bool:
    """Whether ``key`` is the master key of a ledger whose metadata holds ``stored_hash``."""
    return hmac.compare_digest(key_hash(key), stored_hash)
