"""The storage side's per-message costs, one 1 KiB entry at a time, in µs per call: what a
bookie's event loop spends on an add outside the protocol and the scheduler.

    cd CHECKOUT && .venv/bin/python benchmarks/latency/storage_costs.py
    cd BEFORE && .venv/bin/python CHECKOUT/benchmarks/latency/storage_costs.py   # any checkout

Each figure is the best of seven rounds of 20,000 calls, in CPU time (real files under a temporary
directory; nothing is fsynced).
"""

from __future__ import annotations

import os
import tempfile
import time
import timeit
from pathlib import Path

from bkframe_journal_fs.group_buffer import GroupBuffer

from bkframe.bookie.durability import journal_records
from bkframe.core.counters import Counters
from bkframe.core.interfaces.ledger_storage import LedgerState
from bkframe.plugins.entry_log_single import SingleEntryLogManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage
from bkframe.plugins.ledger_storage_default.ledger_index import encode_header

N = 20_000


def per_call(fn: object) -> float:
    # CPU time, not wall time: on a shared machine the other processes' slices are not ours.
    return min(timeit.repeat(fn, number=N, repeat=7, timer=time.thread_time)) / N * 1e6  # type: ignore[arg-type]


def main() -> None:
    payload = os.urandom(1024)
    record = b"".join(journal_records.entries_record(7, [5], [payload], 4))
    with tempfile.TemporaryDirectory() as tmp:
        counters = Counters()
        logs = SingleEntryLogManager(Path(tmp) / "entrylogs", counters, max_log_size=1 << 30)
        storage = DefaultLedgerStorage(Path(tmp) / "ledgers", logs, counters, index_initial_entries=1 << 20)
        storage.ensure_ledger(7, b"k", 1)
        ids = iter(range(10**9))

        def add() -> None:
            e = next(ids)
            storage.add_entries(7, [e], [payload])
            storage.set_lac(7, e - 1)

        group = [GroupBuffer(0, 20)]

        def frame() -> None:
            if len(group[0].lead) > 8 << 20:
                group[0] = GroupBuffer(0, 20)
            group[0].add(journal_records.entries_record(7, [5], [payload], 4))

        index = storage._index(7)
        state = LedgerState(ledger_id=7, master_key=b"k" * 20, lac=12345, ledger_type=1)
        slot = iter(range(10**9))

        figures = {
            "ledger_index.encode_header": per_call(lambda: encode_header(state)),
            "LedgerIndex.reserve + store_one": per_call(lambda: index.store_one(e := next(slot), e * 1040, 1, 1044)),
            "journal_records.entries_record": per_call(lambda: journal_records.entries_record(7, [5], [payload], 4)),
            "journal_records.decode": per_call(lambda: journal_records.decode(record)),
            "GroupBuffer.add (record framed, CRC32C)": per_call(frame),
            "storage add_entries + set_lac": per_call(add),
        }
    for name, us in figures.items():
        print(f"{us:8.2f} us  {name}")


if __name__ == "__main__":
    main()
