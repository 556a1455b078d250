"""The test suites of the repository (``tests/`` and each ``plugins/*/tests/``) share the
fixtures a plugin author gets from ``bkframe.testing.pytest_plugin``; the fault suite adds
its command-line options (``--fault-seeds`` ...)."""

pytest_plugins = ("bkframe.testing.pytest_plugin", "tests.faults.options")
