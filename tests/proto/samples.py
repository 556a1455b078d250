"""A message of each operation of proto/table.py, each way: what the table-driven tests of
tests/proto (test_table.py, test_bounds.py, test_decoder_fuzz.py) iterate. An operation
added to the table fails them until it has its samples here."""

from __future__ import annotations

from bkframe.core.interfaces import Buffer
from bkframe.proto.codes import Feature, Op, Status
from bkframe.proto.ops.add import encode_add, encode_add_response
from bkframe.proto.ops.add_batch import encode_add_batch, encode_add_batch_response
from bkframe.proto.ops.bookie_info import encode_bookie_info, encode_bookie_info_response
from bkframe.proto.ops.connection_setup import encode_auth, encode_auth_response, encode_features, encode_features_response
from bkframe.proto.ops.list_entries import encode_list_entries, encode_list_entries_response
from bkframe.proto.ops.read import encode_read, encode_read_response
from bkframe.proto.ops.read_batch import encode_read_batch, encode_read_batch_response
from bkframe.proto.ops.read_lac import encode_read_lac, encode_read_lac_response
from bkframe.proto.ops.subscription import (
    SubOutput,
    SubRecord,
    encode_sub_commit,
    encode_sub_commit_response,
    encode_sub_lease,
    encode_sub_lease_response,
    encode_sub_leave,
    encode_sub_leave_response,
    encode_sub_refusal,
    encode_sub_settle,
    encode_sub_settle_response,
    encode_sub_stats,
    encode_sub_stats_response,
)
from bkframe.proto.ops.sync import encode_sync, encode_sync_response
from bkframe.proto.ops.write_close import encode_write_close, encode_write_close_response
from bkframe.proto.ops.write_lac import encode_write_lac, encode_write_lac_response

KEY = b"k" * 8
LEDGER = 7
#: A packed position (segment 3, entry 9) of the subscription samples.
POSITION = 3 << 32 | 9
RECORD = SubRecord(POSITION, 2, 1_700_000_000_000, b"payload", b"key", 1_699_999_999_000, {"k": "v"})
STATS = dict(
    backlog=5, in_flight=2, waiting=1, delayed=0, delivered=9, redelivered=3, acked=4, dead_lettered=1,
    mark_delete=POSITION, consumers=2, epoch=3, owner="bookie-1",
)


def joined(message: Buffer | list[Buffer]) -> bytes:
    return b"".join(bytes(p) for p in message) if isinstance(message, list) else bytes(message)


#: A request of each op, request id 5, ledger LEDGER where it has one. Each ends with its
#: last field (ADD's entry is empty): a byte less or more makes it one that does not parse,
#: but for ADD, whose entry is the rest of the message.
REQUESTS: dict[int, bytes] = {
    Op.ADD: joined(encode_add(5, LEDGER, 3, 2, 0, KEY, b"", recovery=True)),
    Op.ADD_BATCH: joined(encode_add_batch(5, LEDGER, 2, 0, KEY, [3, 4], [b"a", b"bc"])),
    Op.READ: encode_read(5, LEDGER, 3, master_key=KEY, fence=True),
    Op.READ_BATCH: encode_read_batch(5, LEDGER, 0, 9, 4096, 2, master_key=KEY),
    Op.READ_LAC: encode_read_lac(5, LEDGER, previous_lac=4, timeout_ms=250),
    Op.SYNC: encode_sync(5, LEDGER),
    Op.WRITE_LAC: encode_write_lac(5, LEDGER, 9, KEY),
    Op.WRITE_CLOSE: encode_write_close(5, LEDGER, KEY),
    Op.LIST_ENTRIES: encode_list_entries(5, LEDGER, 0, 99),
    Op.AUTH: encode_auth(5, "token", b"secret"),
    Op.FEATURES: encode_features(5, Feature.TRY_AGAIN),
    Op.GET_BOOKIE_INFO: encode_bookie_info(5),
    Op.SUB_LEASE: encode_sub_lease(5, "jobs", "workers", "consumer-1", 16, 1000, 30_000, password=b"pw"),
    Op.SUB_SETTLE: joined(
        encode_sub_settle(
            5, "jobs", "workers", "consumer-1", acks=[POSITION], ack_ranges=[(POSITION + 1, POSITION + 4)],
            nacks=[(POSITION + 5, 250)], extends=[POSITION + 6], lease_ms=10_000, password=b"pw",
        )
    ),
    Op.SUB_LEAVE: encode_sub_leave(5, "jobs", "workers", "consumer-1"),
    Op.SUB_STATS: encode_sub_stats(5, "jobs", "workers"),
    Op.SUB_COMMIT: joined(
        encode_sub_commit(
            5, "jobs", "workers", "consumer-1", [POSITION, POSITION + 1],
            [SubOutput("results", (41, 42), b"out-pw"), SubOutput("audit", ())], password=b"pw",
        )
    ),
}

#: An OK answer of each op, request id 6.
ANSWERS: dict[int, bytes] = {
    Op.ADD: joined(encode_add_response(6, Status.OK, LEDGER, 3, 2)),
    Op.ADD_BATCH: joined(encode_add_batch_response(6, Status.OK, LEDGER, 2, 1)),
    Op.READ: joined(encode_read_response(6, Status.OK, LEDGER, 3, 2, b"entry")),
    Op.READ_BATCH: joined(encode_read_batch_response(6, Status.OK, LEDGER, 12, [10, 12], [b"a", b"ccc"])),
    Op.READ_LAC: joined(encode_read_lac_response(6, Status.OK, LEDGER, 2, 3)),
    Op.SYNC: joined(encode_sync_response(6, Status.OK, LEDGER, 4)),
    Op.WRITE_LAC: joined(encode_write_lac_response(6, Status.OK, LEDGER, 9)),
    Op.WRITE_CLOSE: joined(encode_write_close_response(6, Status.OK, LEDGER)),
    Op.LIST_ENTRIES: joined(encode_list_entries_response(6, Status.OK, LEDGER, limbo=True, next_first=10, runs=[(0, 2)])),
    Op.AUTH: joined(encode_auth_response(6, Status.OK, "alice")),
    Op.FEATURES: joined(encode_features_response(6, Feature.TRY_AGAIN)),
    Op.GET_BOOKIE_INFO: joined(encode_bookie_info_response(6, {"state": "writable"})),
    Op.SUB_LEASE: joined(encode_sub_lease_response(6, [RECORD, SubRecord(POSITION + 1, 1, 0, b"")])),
    Op.SUB_SETTLE: joined(encode_sub_settle_response(6)),
    Op.SUB_LEAVE: joined(encode_sub_leave_response(6)),
    Op.SUB_STATS: joined(encode_sub_stats_response(6, **STATS)),
    Op.SUB_COMMIT: joined(encode_sub_commit_response(6, {"results": (7, 8), "audit": ()})),
}

#: A refusal of each op whose answer carries a status of its own, request id 8, saying WHY
#: (the others are refused with an ERROR message).
WHY = "why it was refused"
REFUSALS: dict[int, bytes] = {
    Op.ADD: joined(encode_add_response(8, Status.FENCED, LEDGER, 3, -1, WHY)),
    Op.ADD_BATCH: joined(encode_add_batch_response(8, Status.READ_ONLY, LEDGER, 2, -1, WHY)),
    Op.READ: joined(encode_read_response(8, Status.NO_ENTRY, LEDGER, 4, 2, WHY.encode())),
    Op.READ_BATCH: joined(encode_read_batch_response(8, Status.NO_LEDGER, LEDGER, -1, message=WHY)),
    Op.READ_LAC: joined(encode_read_lac_response(8, Status.NO_LEDGER, LEDGER, -1, -1, WHY)),
    Op.SYNC: joined(encode_sync_response(8, Status.IO_ERROR, LEDGER, -1, WHY)),
    Op.WRITE_LAC: joined(encode_write_lac_response(8, Status.FENCED, LEDGER, -1, WHY)),
    Op.WRITE_CLOSE: joined(encode_write_close_response(8, Status.UNAUTHORIZED, LEDGER, WHY)),
    Op.LIST_ENTRIES: joined(encode_list_entries_response(8, Status.NO_LEDGER, LEDGER, message=WHY)),
    Op.AUTH: joined(encode_auth_response(8, Status.UNAUTHORIZED, WHY)),
    Op.SUB_LEASE: encode_sub_refusal(Op.SUB_LEASE, 8, Status.NOT_OWNER, WHY, holder="bookie-2"),
    Op.SUB_SETTLE: encode_sub_refusal(Op.SUB_SETTLE, 8, Status.NO_SUBSCRIPTION, WHY),
    Op.SUB_LEAVE: encode_sub_refusal(Op.SUB_LEAVE, 8, Status.NOT_OWNER, WHY),
    Op.SUB_STATS: encode_sub_refusal(Op.SUB_STATS, 8, Status.TOO_MANY_REQUESTS, WHY),
    Op.SUB_COMMIT: encode_sub_refusal(Op.SUB_COMMIT, 8, Status.BAD_REQUEST, WHY),
}
