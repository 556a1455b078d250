"""bkframe's contract suites run under trio wherever they are subclassed: a pytest plugin,
registered through bkframe's ``pytest11`` entry point, so a plugin author's package needs no
``trio_mode = true`` (without it pytest-trio leaves every async test alone and pytest fails
them with "async def functions are not natively supported").

Only the tests of classes built on a suite of :mod:`bkframe.testing` are marked
``@pytest.mark.trio``; the package's other async tests are left to its own settings (its
``trio_mode``, or another async plugin). pytest loads this module in every run of an
environment bkframe is installed in, so it imports nothing of bkframe's.
"""

from __future__ import annotations

import inspect

import pytest

#: Where the contract suites live: a test class with a base class from here is a suite's.
SUITES = "bkframe.testing."


def is_contract_test(item: pytest.Item) -> bool:
    cls = getattr(item, "cls", None)
    function = getattr(item, "obj", None)
    return (
        cls is not None
        and inspect.iscoroutinefunction(function)
        and any(base.__module__.startswith(SUITES) for base in cls.__mro__)
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    contract = [item for item in items if is_contract_test(item) and item.get_closest_marker("trio") is None]
    if not contract:
        return
    if not config.pluginmanager.hasplugin("trio"):
        raise pytest.UsageError(
            "bkframe's contract suites run under trio and pytest-trio is not installed: "
            "pip install 'bkframe[testing]'"
        )
    for item in contract:
        item.add_marker(pytest.mark.trio)
