"""The test suites of the repository (``tests/`` and each ``plugins/*/tests/``) share the
fixtures a plugin author gets from ``bkframe.testing.pytest_plugin``; the fault suite adds
its command-line options (``--fault-seeds`` ...).

The suite runs on several pytest-xdist workers (``scripts/test``). Each test module stays on
one worker (``--dist loadgroup`` with a group per module), so a module's shared clusters
start once; the Spark tests form one group, so one worker starts a SparkSession, not each.
A test marked ``subprocess`` shares nothing with its module (it starts every process it
needs, e.g. a Spark standalone cluster of its own), so it is a group of its own: the long
fault-injection runs spread over the workers. The longest groups are handed out first.
"""

from __future__ import annotations

import re

import pytest

pytest_plugins = ("bkframe.testing.pytest_plugin", "tests.faults.options")


#: Groups that take minutes: handed out first (xdist hands groups out in collection order
#: with ``--no-loadscope-reorder``, pyproject.toml; by default it sorts them by their number of
#: tests, which sent every one-test group, the long fault runs among them, to the end), so the
#: longest ones run alongside everything else instead of alone at the end. Then the modules of
#: 20-45 s, longest first: collected last (plugins/ comes after tests/), ZooKeeper's and etcd's
#: store contracts were the suite's last groups, two workers running one each for 40 s while
#: the third had nothing left (2-core machine, 2026-11-29, `--durations=0`).
LONG_FIRST = (
    "spark",
    "tests/faults/test_faults.py::test_seeded_fault_schedule",  # ~60 s each
    "tests/faults/", "tests/partitions/", "plugins/spark/",
    "tests/autorecovery/test_autorecovery.py",  # 73 s
    "tests/autorecovery/test_autorecovery_failover.py",  # 72 s
    "tests/autorecovery/test_repair_integrity.py",  # 50 s
    "tests/autorecovery/",
    "tests/client/logs/test_logs.py",  # 46 s
    "plugins/metadata_zk/",  # 43 s
    "plugins/metadata_etcd/",  # 40 s
    "tests/client/test_client_faults.py",  # 37 s
    "tests/client/test_vd_journal.py",  # 36 s
    "tests/client/test_remote_metadata.py",  # 34 s
    "tests/bookie/test_full_disk_recovery.py",  # 25 s
    "tests/plugins/test_metadata_sqlite.py",  # 25 s
    "tests/cli/test_readme_walkthrough.py",  # 23 s
    "tests/cli/test_bench_scale_metadata.py",  # 23 s
)


#: What makes a test ``slow`` (left out of ``./scripts/test --fast``, which runs without root
#: and without Debian's packages in a few minutes): where it lives, the servers and
#: privileges it needs, and the modules that take long on their own.
SLOW_DIRS = (
    "tests/faults/test_clocks.py",  # libfaketime (Debian); the seeded runs are marked subprocess
    "tests/faults/test_soak.py",  # a short soak: 24 s
    "tests/partitions/",  # simulated hosts: root, network namespaces, ZooKeeper ensembles
    "tests/soak/",
)
#: Fixtures of a Debian package (ZooKeeper, etcd: scripts/test installs them as root) or of
#: root (mounting a small filesystem).
SLOW_FIXTURES = frozenset({"zk_server", "etcd_server", "small_filesystem"})
#: Markers of a test that needs Java (Spark) or starts everything it needs for itself.
SLOW_MARKERS = ("spark", "subprocess")
#: A test parametrized over metadata stores, in its ZooKeeper or etcd variant (Debian packages).
SLOW_PARAMS = re.compile(r"\[(?:[^]]*-)?(?:zookeeper|etcd)(?:-[^]]*)?\]")
#: Modules that need root or a Debian package outside the above, or that kill and restart
#: clusters for tens of seconds per test (their measured share of the fast lane, 2-core
#: machine, 2026-11-28, `./scripts/test --fast --durations=0`: about half its time).
SLOW_MODULES = frozenset(
    {
        "tests/admin/test_sandbox_admin.py",  # chromium (Debian)
        "tests/testing/test_hosts.py",  # network namespaces (root)
        "plugins/spark/tests/test_standalone.py",  # a Spark standalone cluster (Java)
        "tests/autorecovery/test_autorecovery_failover.py",  # 75 s
        "tests/autorecovery/test_autorecovery.py",  # 68 s
        "tests/autorecovery/test_repair_integrity.py",  # 48 s
        "tests/autorecovery/test_bypass_journal.py",  # 36 s
        "tests/tiering/test_offload_service.py",  # 23 s
        "tests/client/test_vd_journal.py",  # 39 s
        "tests/client/test_client_faults.py",  # 38 s
        "tests/cli/test_log.py",  # 30 s
        "tests/cli/test_bad_input.py",  # 28 s
        "tests/cli/test_ledger_and_sandbox.py",  # 27 s
        "tests/cli/test_bench_scale_metadata.py",  # 24 s
        "tests/bookie/test_hostile_clients.py",  # 18 s
        "tests/bookie/test_disk_full.py",  # 17 s
        "tests/bookie/test_identity.py",  # 16 s
    }
)


def is_slow(item: pytest.Item) -> bool:
    module = item.nodeid.split("::")[0]
    return (
        module.startswith(SLOW_DIRS)
        or module in SLOW_MODULES
        or SLOW_PARAMS.search(item.nodeid) is not None
        or any(item.get_closest_marker(m) for m in SLOW_MARKERS)
        or not SLOW_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
    )


# tryfirst: xdist's worker turns the xdist_group marks into node ids in its own
# pytest_collection_modifyitems; marks added after it are ignored.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups: dict[str, str] = {}
    for item in items:
        if is_slow(item):
            item.add_marker(pytest.mark.slow)
        module = item.nodeid.split("::")[0]
        if item.get_closest_marker("subprocess"):
            group = item.nodeid
        elif module.startswith("plugins/spark/"):
            group = "spark"
        else:
            group = module
        groups[item.nodeid] = group
        item.add_marker(pytest.mark.xdist_group(group))

    def rank(item: pytest.Item) -> int:
        group = groups[item.nodeid]
        return next((i for i, prefix in enumerate(LONG_FIRST) if group.startswith(prefix)), len(LONG_FIRST))

    items.sort(key=rank)  # stable: the order within a rank stays the collection's


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker, fails the run if the groups were not applied: a pytest that
    xdist does not follow (pytest 9 keeps node ids where xdist 3.8 does not write) silently
    scheduled every test alone, starting each module's shared clusters once per worker."""
    if getattr(session.config.option, "loadgroup", False) and session.items:
        grouped = (item.nodeid.endswith(f"@{m.args[0]}") for item in session.items for m in item.iter_markers("xdist_group"))
        if not all(grouped):
            raise pytest.UsageError(
                "pytest-xdist did not apply the xdist_group marks (pytest "
                f"{pytest.__version__}): keep the pytest version pyproject.toml pins (uv sync)"
            )
