"""A short seed of the soak (tests/soak): its code path -- log writers and consumers with
durable cursors, standalone autorecovery, the under-replication and memory sampler, the
log and cursor checks -- on a small cluster for half a minute of faults, so that the
30-bookie run (``python -m tests.soak``, docs/reliability.md) keeps working between runs.
It runs on the sqlite store without simulated hosts: the partition faults, the link proxies
and the ZooKeeper ensemble are the seeded partition run's (test_faults.py, seed 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.schedule import JOURNALED_LEDGERS
from tests.soak.run import SoakRun, soak_config, soak_table


@pytest.mark.timeout(600)
def test_short_soak(tmp_path: Path) -> None:
    # Journaled ledgers only: no wait for a BYPASS bookie to leave limbo after each kill.
    config = soak_config(
        4, 1 / 3, bookies=5, partitions=False, writers=2, readers=1, log_writers=1, log_consumers=1, autorecovery=1,
        ledgers=JOURNALED_LEDGERS, max_down=2, mean_gap_s=2.0, down_s=(1.0, 8.0), warmup_s=2.0, cooldown_s=2.0,
    )
    run = SoakRun(config, tmp_path)
    run.report.reproduce = "uv run --all-packages pytest tests/faults/test_soak.py -s"
    report = run.run()
    table = soak_table(run, report)
    print(report.summary(), *(f"{k}: {v}" for k, v in table.items()), sep="\n")
    assert report.ok, report.summary()
    check = report.check
    assert check is not None
    # The soak's own parts did their work: records acknowledged to the log writer came back,
    # consumers read and committed, and the sampler saw the bookies.
    assert check.stats["log_acked"] > 100 and check.stats["log_records_consumed"] > 0
    assert check.stats["cursors_checked"] == 1
    assert sum(check.acked.values()) > 100
    assert len(run.samples.rss_max) == config.bookies
