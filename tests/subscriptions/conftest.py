"""Three in-process bookies on a sqlite metadata store: subscriptions need real ledgers (their
state ledgers are fenced by recovery), and in-process bookies start in a moment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from bkframe.testing.cluster import make_config, running_bookie


@pytest.fixture
async def bookies(tmp_path: Path) -> AsyncIterator[str]:
    """The metadata URI of three running bookies."""
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    async with AsyncExitStack() as stack:
        for i in range(3):
            await stack.enter_async_context(running_bookie(make_config(tmp_path / f"bookie{i}", metadata=uri)))
        yield uri
