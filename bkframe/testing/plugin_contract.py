"""What the contract suites of pluggable components (:mod:`.metadata_contract`,
:mod:`.tier_contract`) share: the plugin manager that opens the component under test."""

from __future__ import annotations

import pytest

from bkframe.core.plugin_manager import PluginManager


class PluginContract:
    @pytest.fixture
    def plugins(self) -> PluginManager:
        """The plugin manager that opens the component (override to add an uninstalled plugin)."""
        return PluginManager()
