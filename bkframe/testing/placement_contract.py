"""The contract every placement policy keeps (:class:`~bkframe.core.interfaces.placement.PlacementPolicy`),
as a test suite a placement plugin runs on its policy.

Subclass in a test module of your plugin and provide the ``policy_name`` fixture (the name
the policy is registered as; ``policy_options`` too if it takes options)::

    from bkframe.testing.placement_contract import PlacementPolicyContract

    class TestMyPolicy(PlacementPolicyContract):
        @pytest.fixture
        def policy_name(self):
            return "my_policy"

The policy is made through the plugin manager (override ``plugins`` to register a plugin
that is not installed). Candidates each have a rack of their own and a known load, so that
rack-aware and load-aware policies can always choose; what a policy prefers beyond the rules
below (racks, load) is for its own tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from bkframe.core.interfaces.placement import Candidate, PlacementPolicy
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.plugin_contract import PluginContract

#: Rounds of each check: a policy that chooses at random is checked over many choices.
ROUNDS = 50


def candidates(count: int, *, first: int = 0, quarantined: bool = False) -> list[Candidate]:
    return [
        Candidate(f"bookie-{i}:3181", rack=f"/rack-{i}", quarantined=quarantined, ledgers=i % 3)
        for i in range(first, first + count)
    ]


class PlacementPolicyContract(PluginContract):
    """What every placement policy does; see the module docstring."""

    @pytest.fixture
    def policy_name(self) -> str:
        raise NotImplementedError("a subclass provides the policy_name fixture: the name the policy is registered as")

    @pytest.fixture
    def policy_options(self) -> Mapping[str, Any]:
        """The policy's options (the client's placement options), validated against its config class."""
        return {}

    @pytest.fixture
    def policy(self, plugins: PluginManager, policy_name: str, policy_options: Mapping[str, Any]) -> PlacementPolicy:
        return plugins.placement_policy(policy_name, policy_options, source="the contract suite")

    def test_is_a_placement_policy(self, policy: PlacementPolicy) -> None:
        assert isinstance(policy, PlacementPolicy)
        assert isinstance(policy.wants_load, bool)

    @pytest.mark.parametrize(("ensemble_size", "write_quorum"), [(1, 1), (3, 2), (3, 3), (5, 3)])
    def test_a_new_ensemble_is_distinct_candidates(
        self, policy: PlacementPolicy, ensemble_size: int, write_quorum: int
    ) -> None:
        """``ensemble_size`` distinct ids, each a candidate's, from exactly enough candidates and from more."""
        for count in (ensemble_size, ensemble_size + 3):
            offered = candidates(count)
            for _ in range(ROUNDS):
                chosen = policy.new_ensemble(offered, ensemble_size=ensemble_size, write_quorum=write_quorum)
                assert len(chosen) == ensemble_size == len(set(chosen))
                assert set(chosen) <= {c.bookie_id for c in offered}

    def test_quarantined_bookies_are_taken_last(self, policy: PlacementPolicy) -> None:
        """A bookie that failed lately is chosen only when the healthy ones are not enough."""
        healthy, failing = candidates(4), candidates(3, first=4, quarantined=True)
        for _ in range(ROUNDS):
            chosen = policy.new_ensemble([*failing, *healthy], ensemble_size=3, write_quorum=2)
            assert set(chosen) <= {c.bookie_id for c in healthy}
            chosen = policy.new_ensemble([*failing, *healthy], ensemble_size=6, write_quorum=2)
            assert {c.bookie_id for c in healthy} <= set(chosen)

    @pytest.mark.parametrize("failed", [[0], [2], [0, 2]])
    def test_replacements_are_distinct_candidates(self, policy: PlacementPolicy, failed: list[int]) -> None:
        """One replacement per failed index, all distinct, each a candidate (never a member of the ensemble)."""
        ensemble = candidates(3)
        offered = candidates(4, first=3)
        for _ in range(ROUNDS):
            chosen = policy.replacements(offered, ensemble=ensemble, failed=failed, write_quorum=2)
            assert sorted(chosen) == sorted(failed)
            assert len(set(chosen.values())) == len(failed)
            assert set(chosen.values()) <= {c.bookie_id for c in offered}
