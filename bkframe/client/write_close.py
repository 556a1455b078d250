"""BP-32's advisory write close: a writer that closed its ledger tells the ensemble's
bookies, so an entry-log manager that keeps a log per ledger can seal it at once.

Advisory: the ledger is closed by its metadata, not by this; nothing waits for it and a
bookie that does not get it (down, slow) only seals the log later by its own rules.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from bkframe.client.context import ClientContext
from bkframe.proto.codes import Status

log = logging.getLogger("bkframe.client")


async def advise_write_close(ctx: ClientContext, ledger_id: int, master_key: bytes, ensemble: Sequence[str]) -> None:
    """Send WRITE_CLOSE to every bookie of ``ensemble``, each bounded by the read timeout;
    failures are logged at debug level."""
    done = 0

    async def advise(bookie_id: str) -> None:
        nonlocal done
        try:
            conn = await ctx.pool.get(bookie_id)
            response = await conn.submit_write_close(
                ledger_id, master_key=master_key, timeout_s=ctx.settings.read_timeout_s
            ).wait()
        except ConnectionError as e:
            log.debug("ledger %d: write close not delivered to %s: %s", ledger_id, bookie_id, e)
            return
        done += response.status == Status.OK

    async with anyio.create_task_group() as nursery:
        for bookie_id in ensemble:
            nursery.start_soon(advise, bookie_id)
    log.debug("ledger %d: write close acknowledged by %d of %d bookies", ledger_id, done, len(ensemble))
