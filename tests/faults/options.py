"""Command-line options of the fault-injection suite, a pytest plugin loaded by
the top-level ``conftest.py`` (``pytest_plugins``): options must be registered by a conftest pytest
loads at startup, which ``tests/faults/conftest.py`` is only when its directory is named
on the command line, so ``pytest --fault-seeds 20`` from the repo root would be refused.

``--fault-seeds N``     the seeded test runs seeds 1..N (default 3)
``--fault-events M``    faults per seeded run (default 34: 3 seeds give >= 100 faults in all)
``--fault-seed S``      run exactly seed S (repeatable; overrides --fault-seeds)
``--fault-subscriptions``  the seeded runs add a subscription, its producer and consumers, and
                       consumer kills and hangs to their faults (schedule.with_subscriptions)
``--fault-compaction``  the seeded runs add a compacted log, its writer, compactor and table
                       reader, and compactor kills to their faults (schedule.with_compaction;
                       partition seeds then run without partitions)
"""

from __future__ import annotations

import pytest

DEFAULT_SEEDS = 3
DEFAULT_EVENTS = 34


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faults", "bkframe fault-injection suite (tests/faults, docs/reliability.md)")
    group.addoption("--fault-seeds", type=int, default=DEFAULT_SEEDS, metavar="N",
                    help=f"run the seeded fault schedule for seeds 1..N (default {DEFAULT_SEEDS})")
    group.addoption("--fault-events", type=int, default=DEFAULT_EVENTS, metavar="M",
                    help=f"faults per seeded run (default {DEFAULT_EVENTS})")
    group.addoption("--fault-seed", type=int, action="append", default=[], metavar="S",
                    help="run exactly this seed (repeatable); overrides --fault-seeds")
    group.addoption("--fault-subscriptions", action="store_true", default=False,
                    help="seeded runs with a key_shared subscription and consumer kills and hangs (another schedule)")
    group.addoption("--fault-compaction", action="store_true", default=False,
                    help="seeded runs with a compacted log, its compactor killed among the faults (another schedule)")
