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

import pytest

pytest_plugins = ("bkframe.testing.pytest_plugin", "tests.faults.options")


#: Groups that take minutes: handed out first (xdist hands groups out in collection order
#: with ``--no-loadscope-reorder``, pyproject.toml; by default it sorts them by their number of
#: tests, which sent every one-test group, the long fault runs among them, to the end), so the
#: longest ones run alongside everything else instead of alone at the end.
LONG_FIRST = ("spark", "tests/faults/", "tests/partitions/", "plugins/spark/", "tests/replication/")


# tryfirst: xdist's worker turns the xdist_group marks into node ids in its own
# pytest_collection_modifyitems; marks added after it are ignored.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups: dict[str, str] = {}
    for item in items:
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
