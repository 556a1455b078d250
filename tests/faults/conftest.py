"""Fixtures of the fault-injection suite; its options live in options.py (see there why)."""

from __future__ import annotations

import pytest


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fault_seed" in metafunc.fixturenames:
        seeds = metafunc.config.getoption("--fault-seed") or range(1, metafunc.config.getoption("--fault-seeds") + 1)
        metafunc.parametrize("fault_seed", list(seeds), ids=[f"seed{s}" for s in seeds])


@pytest.fixture
def fault_events(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--fault-events"))


@pytest.fixture
def fault_subscriptions(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--fault-subscriptions"))


@pytest.fixture
def fault_compaction(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--fault-compaction"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A seeded run's length grows with --fault-events; the harness's own deadlines end a
    # stuck run well before this, which only stops a harness bug from hanging the suite.
    events = int(config.getoption("--fault-events"))
    for item in items:
        if "fault_seed" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(900 + 20 * events))
