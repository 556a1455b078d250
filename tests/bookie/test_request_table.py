"""The bookie serves every operation of proto/table.py through its own table, keyed by op,
and will not start with an operation it has no handler for (without a socket: the table
is built from the context's parts, which these tests never use)."""

from __future__ import annotations

from unittest.mock import Mock

import pytest

from bkframe.bookie.requests import RequestHandler
from bkframe.proto.base import ErrorResponse
from bkframe.proto.codes import Op
from bkframe.proto.table import OPERATIONS, Operation


def test_every_operation_has_a_handler() -> None:
    handler = RequestHandler(Mock(), info=dict)
    assert set(handler.handlers) == set(OPERATIONS)


def test_a_bookie_without_a_handler_for_an_operation_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    unserved = Operation(Op.ERROR, ErrorResponse, ErrorResponse, Mock(), Mock())
    monkeypatch.setitem(OPERATIONS, Op.ERROR, unserved)
    with pytest.raises(RuntimeError, match="without a handler on the bookie: ERROR"):
        RequestHandler(Mock(), info=dict)
