"""An offload whose ledger read fails raises that failure as itself (a BKError a caller
catches), not wrapped in the reading task's exception group."""

from __future__ import annotations

from typing import Any

import pytest

from bkframe import BKError
from bkframe.client.logs.model import Segment
from bkframe.tiering.segment_writer import _copy_ledger


class _Unreadable:
    async def read_block(self, first: int, last: int) -> Any:
        raise BKError(f"entry 26:{first} could not be read from any replica")


class _Builder:
    def add(self, block: Any) -> None:
        raise AssertionError("nothing was read")


async def test_a_failed_read_is_raised_as_itself() -> None:
    seg = Segment(3, 26, closed=True, last_entry_id=9, length=100)
    with pytest.raises(BKError, match="could not be read from any replica"):
        await _copy_ledger(_Unreadable(), seg, _Builder())  # type: ignore[arg-type]
