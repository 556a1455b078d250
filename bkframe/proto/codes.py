"""The wire protocol's vocabulary: op codes, status codes, flags, limits and the two headers.

``docs/protocol.md`` documents every byte. In short: a connection carries length-prefixed
*frames* in both directions (:mod:`.frames`); a frame holds one or more *messages*, each
with its own length, an op code, flags (requests) or a status (responses) and a request
id. Responses carry the request id of their request and may come in any order and any
grouping. All integers are little-endian. Each operation's messages are in its own module
of :mod:`bkframe.proto.ops`.
"""

from __future__ import annotations

import enum
import struct

import numpy as np

PROTOCOL_VERSION = 1

FRAME_HEADER = struct.Struct("<I")
#: Every message starts with: length of the rest u32, op u8, flags-or-status u8, request id u64.
MSG_HEADER = struct.Struct("<IBBQ")
#: What a message's length counts of its header (op, flags or status, request id).
MSG_HEADER_REST = MSG_HEADER.size - 4
#: Frames larger than this close the connection: the peer is not speaking our protocol.
MAX_FRAME_SIZE = 64 * 1024 * 1024
MAX_MASTER_KEY = 64
#: Ledger ids are u64 on the wire, but metadata stores keep them as signed 64-bit integers
#: (sqlite, ZooKeeper and etcd paths, BookKeeper's own ``long``): larger ones are refused.
MAX_LEDGER_ID = (1 << 63) - 1


class Op(enum.IntEnum):
    ERROR = 0  # only in responses: a message that could not be parsed
    ADD = 1
    READ = 2
    READ_LAC = 3
    GET_BOOKIE_INFO = 4
    ADD_BATCH = 5
    SYNC = 6
    WRITE_LAC = 7
    LIST_ENTRIES = 8
    WRITE_CLOSE = 9
    READ_BATCH = 10
    #: The first message of a connection: who the client is (see bkframe.core.interfaces.auth).
    AUTH = 11
    #: Right after AUTH, in its frame: what the client understands (see :class:`Feature`).
    FEATURES = 12
    #: Subscriptions (docs/subscriptions.md), served by the bookie hosting the subscription's
    #: owner: lease records, settle (ack, nack, extend) them, leave, and the stats.
    SUB_LEASE = 13
    SUB_SETTLE = 14
    SUB_LEAVE = 15
    SUB_STATS = 16
    #: Exactly once through a worker: ack records with the worker's output ledgers in one
    #: multi-log commit (docs/subscriptions.md).
    SUB_COMMIT = 17


class Status(enum.IntEnum):
    OK = 0
    NO_LEDGER = 1
    NO_ENTRY = 2
    FENCED = 3
    UNAUTHORIZED = 4
    UNKNOWN = 5
    READ_ONLY = 6
    BAD_REQUEST = 7
    IO_ERROR = 8
    TOO_MANY_REQUESTS = 9
    #: Not decided yet (the metadata store has not vouched for the ledger's key): send the
    #: same request to the same bookie again. Only to clients that sent FEATURES TRY_AGAIN.
    TRY_AGAIN = 10
    #: SUB_* only: this bookie does not own the subscription; the message is the owner's
    #: bookie id (empty: none known, ask another bookie), a newline, then why. Only answers
    #: SUB_* requests, which older clients never send, so no FEATURES bit guards it.
    NOT_OWNER = 11
    #: SUB_* only: the log has no subscription of that name.
    NO_SUBSCRIPTION = 12


class AddFlag(enum.IntFlag):
    RECOVERY = 0x01


class ReadLacFlag(enum.IntFlag):
    #: Hold the response until the bookie's LAC passes ``previous_lac`` or the timeout ends.
    LONG_POLL = 0x01


class ReadFlag(enum.IntFlag):
    FENCE = 0x01


class Feature(enum.IntFlag):
    """What a client understands beyond protocol version 1 (a FEATURES request's bits)."""

    #: Answers with status TRY_AGAIN, which it sends again to the same bookie.
    TRY_AGAIN = 0x01


#: Frames a client builds are cut at about this size (a frame holds whole messages).
TARGET_FRAME_SIZE = 1024 * 1024
#: The largest entry a client may send (its ``max_entry_size`` is at most this): one frame
#: carries the entry with the rest of its ADD_BATCH and the messages queued before it (each
#: part under TARGET_FRAME_SIZE), and still stays under MAX_FRAME_SIZE.
MAX_ENTRY_SIZE = MAX_FRAME_SIZE - 4 * TARGET_FRAME_SIZE

#: Read of this entry id means "the last entry this bookie holds" (as in BookKeeper).
LAST_ENTRY = -1
#: A LIST_ENTRIES answer covers at most this many entry ids; ``next`` says where to go on.
MAX_LIST_SPAN = 1 << 20
#: READ_BATCH: at most this many entries asked in one request.
MAX_READ_BATCH = 1 << 16
#: The directory of an ADD_BATCH (and of a READ_BATCH answer): one (entry id, length) per
#: entry, in order.
BATCH_DIRECTORY = np.dtype([("entry_id", "<i8"), ("length", "<u4")])
#: Longest AUTH method name and credential accepted.
MAX_AUTH_METHOD = 255
MAX_AUTH_CREDENTIAL = 16 * 1024
#: SUB_LEASE: at most this many records asked in one request.
MAX_SUB_LEASE = 4096
#: SUB_SETTLE: at most this many acks, ack ranges, nacks and extends in all in one request.
MAX_SUB_SETTLE = 1 << 16
#: The longest consumer id (UTF-8 bytes); log and subscription names follow the log name
#: rules (at most 200 ASCII characters: bkframe.client.logs.model.check_name).
MAX_SUB_CONSUMER = 255
#: SUB_LEASE answers: at most this many properties a record, each key at most 64 KiB.
MAX_SUB_PROPERTIES = 4096
#: SUB_COMMIT: at most this many output logs, and ledgers per output log.
MAX_SUB_COMMIT_OUTPUTS = 64
MAX_SUB_COMMIT_LEDGERS = 4096
