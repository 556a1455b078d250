"""proto/table.py is the one description of an operation: for every row, without a socket,
its request decodes to the row's request class, its answers to the row's response class,
and the client hands an answer -- an ERROR message included -- to the request as that
class. (Field by field round trips: test_codec.py; the bytes themselves: test_wire_compat.py.)"""

from __future__ import annotations

import pytest

from bkframe.client.bookies.pending_response import PendingResponse
from bkframe.proto.base import BadMessage, Reply
from bkframe.proto.codes import Op, Status
from bkframe.proto.table import OPERATIONS, decode_requests, decode_responses, encode_error_response
from tests.proto.samples import ANSWERS, REFUSALS, REQUESTS, WHY

OPS = sorted(OPERATIONS)


def test_every_operation_has_its_samples() -> None:
    assert set(REQUESTS) == set(ANSWERS) == set(OPERATIONS)
    assert set(REFUSALS) <= set(OPERATIONS)


def test_every_row_is_its_own_op() -> None:
    for op, row in OPERATIONS.items():
        assert row.op == op and row.response.op == op, row
        assert REQUESTS[op][4] == op and ANSWERS[op][4] == op  # what its module's encoders write


@pytest.mark.parametrize("op", OPS, ids=[Op(op).name for op in OPS])
def test_a_request_decodes_to_its_rows_class(op: int) -> None:
    (request,) = decode_requests(memoryview(REQUESTS[op]), 1 << 20)
    assert not isinstance(request, BadMessage), request
    assert type(request) is OPERATIONS[op].request and request.request_id == 5


@pytest.mark.parametrize("op", OPS, ids=[Op(op).name for op in OPS])
def test_an_answer_decodes_to_its_rows_class(op: int) -> None:
    (answer,) = decode_responses(ANSWERS[op])
    assert type(answer) is OPERATIONS[op].response and (answer.request_id, answer.status) == (6, Status.OK)
    if op in REFUSALS:
        (refusal,) = decode_responses(REFUSALS[op])
        assert type(refusal) is OPERATIONS[op].response and refusal.request_id == 8
        assert refusal.status != Status.OK and refusal.message == WHY


@pytest.mark.parametrize("op", OPS, ids=[Op(op).name for op in OPS])
def test_the_client_hands_any_answer_to_a_request_as_its_rows_class(op: int) -> None:
    row = OPERATIONS[op]
    answered: PendingResponse[Reply] = PendingResponse(row.response)
    (answer,) = decode_responses(ANSWERS[op])
    answered._set(answer)
    assert answered.result() is answer
    refused: PendingResponse[Reply] = PendingResponse(row.response)
    (error,) = decode_responses(encode_error_response(9, Status.BAD_REQUEST, WHY))
    refused._set(error)
    result = refused.result()
    assert type(result) is row.response and (result.status, result.message) == (Status.BAD_REQUEST, WHY)
