"""The bytes of an entry as the client writes them and bookies store them (opaquely).

::

    ledger_id u64 | entry_id i64 | lac i64 | length u64 | digest | payload

``length`` is the ledger's total payload length up to and including this entry. The
digest covers the header and the payload: CRC32C (4 bytes, catches corruption) or
HMAC-SHA256 keyed by the ledger password (32 bytes, also catches forgery). Readers verify
every entry and fail over to another replica on a mismatch.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

import attrs
import crc32c
import numpy as np
import numpy.typing as npt

from bkframe.core.interfaces import Buffer
from bkframe.core.metadata import DigestType
from bkframe.errors import BKError, EntryTooLargeError

HEADER = struct.Struct("<QqqQ")
#: The header's fields as an array's, to check many entries at once.
HEADER_DTYPE = np.dtype([("ledger_id", "<u8"), ("entry_id", "<i8"), ("lac", "<i8"), ("length", "<u8")])
_HEADER_BYTES = np.arange(HEADER.size)


#: Where the maximum entry size comes from, as messages say it.
LIMIT_SOURCE = "the bookies' [bookie] max_entry_size and the client's max_entry_size set it"


def digest_size(digest_type: DigestType) -> int:
    return 4 if digest_type == DigestType.CRC32C else 32


def max_payload(max_entry_size: int, digest_type: DigestType) -> int:
    """The largest payload whose entry (header, digest, payload) fits ``max_entry_size``."""
    return max_entry_size - HEADER.size - digest_size(digest_type)


def too_large(what: str, size: int, max_entry_size: int, digest_type: DigestType) -> EntryTooLargeError:
    """The error for a payload of ``size`` bytes over :func:`max_payload`; ``what`` names
    the ledger or log."""
    limit = max_payload(max_entry_size, digest_type)
    return EntryTooLargeError(
        f"{what}: an entry of {size} bytes is over the maximum of {limit} (max_entry_size {max_entry_size} less "
        f"a {max_entry_size - limit}-byte header; {LIMIT_SOURCE}); split it. Nothing was sent: the writer "
        f"takes further entries",
        size,
        limit,
    )


class DigestMismatchError(BKError, ValueError):
    """An entry's digest does not match its bytes: corrupt or forged on that replica."""


@attrs.frozen
class Digester:
    digest_type: DigestType
    mac_key: bytes = b""
    #: False only for :meth:`unkeyed`: an HMAC cannot be checked without the password.
    keyed: bool = True

    @classmethod
    def for_ledger(cls, digest_type: DigestType, password: bytes) -> Digester:
        return cls(digest_type, hashlib.sha256(b"bkframe-mac-key:" + password).digest())

    @classmethod
    def unkeyed(cls, digest_type: DigestType) -> Digester:
        """For a bookie repairing a ledger without its password: checks CRC32C digests fully,
        HMAC entries only for shape and ids (readers, who know the password, check the rest)."""
        return cls(digest_type, b"", keyed=False)

    @property
    def verifies(self) -> bool:
        """Whether :meth:`decode` checks the digest fully (not an HMAC without the password)."""
        return self.keyed or self.digest_type == DigestType.CRC32C

    @property
    def size(self) -> int:
        return digest_size(self.digest_type)

    def _digest(self, header: Buffer, payload: Buffer) -> bytes:
        if self.digest_type == DigestType.CRC32C:
            return struct.pack("<I", crc32c.crc32c(payload, crc32c.crc32c(header)))
        mac = hmac.new(self.mac_key, header, hashlib.sha256)
        mac.update(payload)
        return mac.digest()

    def encode(self, ledger_id: int, entry_id: int, lac: int, length: int, payload: Buffer) -> bytes:
        header = HEADER.pack(ledger_id, entry_id, lac, length)
        return b"".join((header, self._digest(header, payload), payload))

    def decode(self, ledger_id: int, entry_id: int, data: bytes) -> tuple[int, int, bytes]:
        """Verify and split a stored entry; returns ``(lac, length, payload)``."""
        size = HEADER.size + self.size
        if len(data) < size:
            raise DigestMismatchError(f"entry {ledger_id}:{entry_id} is {len(data)} bytes, shorter than its header")
        led, ent, lac, length = HEADER.unpack_from(data)
        header = data[: HEADER.size]
        payload = data[size:]
        if self.verifies and not hmac.compare_digest(self._digest(header, payload), data[HEADER.size : size]):
            raise DigestMismatchError(f"entry {ledger_id}:{entry_id} fails its {self.digest_type.value} digest")
        if (led, ent) != (ledger_id, entry_id):
            raise DigestMismatchError(f"asked for entry {ledger_id}:{entry_id}, the bookie returned {led}:{ent}")
        return lac, length, payload

    def verify_batch(
        self,
        ledger_id: int,
        data: Buffer,
        starts: npt.NDArray[np.int64],
        ends: npt.NDArray[np.int64],
        entry_ids: npt.NDArray[np.int64],
    ) -> tuple[int, int]:
        """:meth:`decode` of the stored entries ``data[starts[i]:ends[i]]`` that should be
        entries ``entry_ids[i]``, in bulk: returns how many of them, from the first, are
        whole and verified (a range read uses those and reads the rest one by one), and the
        highest LAC they carry (-1: none). Payload ``i`` is ``data[starts[i] +
        self.header_size:ends[i]]``. Every digest is still checked, each by itself; only
        the headers' fields are checked as arrays."""
        size = self.header_size
        n = len(starts)
        short = np.flatnonzero(ends - starts < size)
        good = int(short[0]) if short.size else n
        if good == 0:
            return 0, -1
        raw = np.frombuffer(data, dtype=np.uint8)
        at = starts[:good]
        heads = raw[at[:, None] + _HEADER_BYTES].view(HEADER_DTYPE).reshape(good)
        wrong = np.flatnonzero((heads["ledger_id"] != ledger_id) | (heads["entry_id"] != entry_ids[:good]))
        if wrong.size:
            good = int(wrong[0])
        if self.verifies and good:
            good = self._digests_ok(raw, data, at[:good], ends[:good])
        return good, int(heads["lac"][:good].max()) if good else -1

    @property
    def header_size(self) -> int:
        """Bytes before the payload in a stored entry: the header and the digest."""
        return HEADER.size + self.size

    def _digests_ok(
        self, raw: npt.NDArray[np.uint8], data: Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
    ) -> int:
        """How many of the entries, from the first, match their digest."""
        view = memoryview(data)
        h, size = HEADER.size, self.header_size
        if self.digest_type == DigestType.CRC32C:
            # The digest covers header then payload, with itself in between: two calls.
            crc = crc32c.crc32c
            stored = raw[starts[:, None] + np.arange(h, size)].view("<u4").reshape(len(starts)).tolist()
            for i, (s, e, want) in enumerate(zip(starts.tolist(), ends.tolist(), stored)):
                if crc(view[s + size : e], crc(view[s : s + h])) != want:
                    return i
            return len(stored)
        for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
            if not hmac.compare_digest(self._digest(view[s : s + h], view[s + size : e]), view[s + h : s + size]):
                return i
        return len(starts)
