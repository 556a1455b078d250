"""The built-in placement policies' choices, on in-memory candidate lists, and the
``registry.add_placement_policy`` in ``bkframe_register_components`` (registration, duplicates, options)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

import pytest

import bkframe
from bkframe import ConfigError, NotEnoughBookiesError, PluginError
from bkframe.core.config import NoConfig
from bkframe.core.interfaces.placement import Candidate, PlacementError, racks_spanned, write_sets
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.registry import ComponentKind, ComponentRegistry
from bkframe.plugins.placement import LeastUsedPlacement, RackAwareConfig, RackAwarePlacement, RandomPlacement

SIX = [Candidate(f"b{i}", rack=f"rack-{i % 3}") for i in range(6)]


def rack_aware(min_racks: int = 2, enforce: bool = False) -> RackAwarePlacement:
    return RackAwarePlacement(RackAwareConfig(min_racks=min_racks, enforce_min_racks=enforce))


def racks(ids: list[str], candidates: list[Candidate]) -> list[str]:
    by_id = {c.bookie_id: c.rack for c in candidates}
    return [by_id[b] for b in ids]


def test_write_sets() -> None:
    assert write_sets(4, 2) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert write_sets(3, 3) == [(0, 1, 2)]
    assert racks_spanned(["a", "b", "a", "b"], 2) == 2
    assert racks_spanned(["a", "b", "b", "a"], 2) == 1


@pytest.mark.parametrize(("e", "w", "min_racks"), [(3, 2, 2), (4, 2, 2), (5, 2, 2), (6, 2, 2), (3, 3, 3), (4, 3, 2), (6, 3, 3)])
def test_rack_aware_new_ensembles_span_min_racks(e: int, w: int, min_racks: int) -> None:
    policy = rack_aware(min_racks)
    for _ in range(200):
        chosen = policy.new_ensemble(SIX, ensemble_size=e, write_quorum=w)
        assert len(set(chosen)) == e
        assert racks_spanned(racks(chosen, SIX), w) >= min_racks, chosen


def test_random_placement_breaks_the_rule_which_is_why_rack_aware_exists() -> None:
    spans = Counter(racks_spanned(racks(RandomPlacement().new_ensemble(SIX, ensemble_size=3, write_quorum=3), SIX), 3)
                    for _ in range(200))
    assert spans[3] < 200


def test_rack_aware_replacements_keep_the_rule() -> None:
    policy = rack_aware(3)
    ensemble = [SIX[0], SIX[1], SIX[2]]  # rack-0, rack-1, rack-2
    others = SIX[3:]  # one bookie of each rack
    for _ in range(100):
        chosen = policy.replacements(others, ensemble=ensemble, failed=[1], write_quorum=3)
        assert chosen == {1: "b4"}  # the only other rack-1 bookie
    # E=4 W=2: replacing index 2 keeps both write sets (1,2) and (2,3) on two racks.
    ensemble = [SIX[0], SIX[1], SIX[2], SIX[4]]  # racks 0 1 2 1
    for _ in range(100):
        chosen = rack_aware(2).replacements([SIX[3], SIX[5]], ensemble=ensemble, failed=[2], write_quorum=2)
        assert racks_spanned(["rack-0", "rack-1", racks([chosen[2]], SIX)[0], "rack-1"], 2) == 2


def test_rack_aware_prefers_healthy_bookies() -> None:
    candidates = [Candidate("q", rack="rack-1", quarantined=True), Candidate("h", rack="rack-1")]
    ensemble = [SIX[0], SIX[1], SIX[2]]
    for _ in range(50):
        assert rack_aware(3).replacements(candidates, ensemble=ensemble, failed=[1], write_quorum=3) == {1: "h"}


def test_too_few_racks_falls_back_with_a_warning_or_refuses_when_enforced(caplog: pytest.LogCaptureFixture) -> None:
    two_racks = [Candidate(f"b{i}", rack=f"r{i % 2}") for i in range(4)]
    with caplog.at_level(logging.WARNING, logger="bkframe.placement"):
        chosen = rack_aware(3).new_ensemble(two_racks, ensemble_size=3, write_quorum=3)
    assert len(set(chosen)) == 3
    assert racks_spanned(racks(chosen, two_racks), 3) == 2  # as many racks as there are
    assert "no choice gives every write set 3 racks" in caplog.text and "'r0', 'r1'" in caplog.text
    with pytest.raises(PlacementError, match=r"no choice gives every write set 3 racks .*enforce_min_racks"):
        rack_aware(3, enforce=True).new_ensemble(two_racks, ensemble_size=3, write_quorum=3)
    assert issubclass(PlacementError, NotEnoughBookiesError)


def test_unlabelled_bookies_share_the_default_rack() -> None:
    unlabelled = [Candidate(f"b{i}") for i in range(4)]
    with pytest.raises(PlacementError, match="span 1 rack"):
        rack_aware(2, enforce=True).new_ensemble(unlabelled, ensemble_size=3, write_quorum=2)


def test_least_used_takes_the_emptiest_bookies_healthy_first() -> None:
    candidates = [
        Candidate("busy", ledgers=50),
        Candidate("idle", ledgers=1),
        Candidate("quiet", ledgers=3),
        Candidate("sick", ledgers=0, quarantined=True),
        Candidate("silent", ledgers=None),
    ]
    policy = LeastUsedPlacement()
    assert policy.wants_load
    assert policy.new_ensemble(candidates, ensemble_size=2, write_quorum=2) == ["idle", "quiet"]
    assert policy.new_ensemble(candidates, ensemble_size=4, write_quorum=2) == ["idle", "quiet", "busy", "silent"]
    assert policy.replacements(candidates, ensemble=[Candidate("x")], failed=[0], write_quorum=1) == {0: "idle"}


def test_random_puts_quarantined_bookies_last_and_says_when_there_are_too_few() -> None:
    candidates = [Candidate("q", quarantined=True), *SIX[:2]]
    for _ in range(50):
        assert "q" not in RandomPlacement().new_ensemble(candidates, ensemble_size=2, write_quorum=2)
    with pytest.raises(NotEnoughBookiesError, match="an ensemble of 4 needs 4 writable bookies, 3 are available"):
        RandomPlacement().new_ensemble(candidates, ensemble_size=4, write_quorum=2)


# -- the hook ---------------------------------------------------------------------------------


class SortedPlacement:
    """A third party's policy: the alphabetically first bookies."""

    wants_load = False

    def new_ensemble(self, candidates: Sequence[Candidate], *, ensemble_size: int, write_quorum: int) -> list[str]:
        return sorted(c.bookie_id for c in candidates)[:ensemble_size]

    def replacements(
        self, candidates: Sequence[Candidate], *, ensemble: Sequence[Candidate], failed: Sequence[int], write_quorum: int
    ) -> dict[int, str]:
        return dict(zip(failed, sorted(c.bookie_id for c in candidates)))


class SortedPlugin:
    @bkframe.hookimpl
    def bkframe_register_components(self, registry: ComponentRegistry) -> None:
        registry.add_placement_policy("sorted", lambda config: SortedPlacement(), config=NoConfig, description="first by id")


def test_placement_policies_are_registered_by_name() -> None:
    pm = PluginManager(load_entry_points=False, extra_plugins=[SortedPlugin()])
    assert pm.components.names(ComponentKind.PLACEMENT_POLICY) == ["least_used", "rack_aware", "random", "sorted"]
    component = pm.components.get(ComponentKind.PLACEMENT_POLICY, "sorted")
    assert component is not None and component.plugin != "bkframe.plugins.placement"
    policy = pm.placement_policy("sorted", {})
    assert policy.new_ensemble(SIX[::-1], ensemble_size=2, write_quorum=2) == ["b0", "b1"]
    rack = pm.placement_policy("rack_aware", {"min_racks": 3, "enforce_min_racks": True})
    assert isinstance(rack, RackAwarePlacement) and rack.min_racks == 3 and rack.enforce


def test_placement_policy_names_and_options_are_checked() -> None:
    pm = PluginManager(load_entry_points=False)
    with pytest.raises(ConfigError, match=r"placement policy 'nope': no installed plugin provides it \(installed: "
                                          r"least_used, rack_aware, random\)"):
        pm.placement_policy("nope", {})
    with pytest.raises(ConfigError, match=r"placement policy 'rack_aware': unknown key\(s\) min_rack; known keys: "
                                          r"enforce_min_racks, min_racks"):
        pm.placement_policy("rack_aware", {"min_rack": 2})
    with pytest.raises(ConfigError, match=r"min_racks = 0 should be an integer >= 1"):
        pm.placement_policy("rack_aware", {"min_racks": 0})


def test_a_placement_policy_name_registered_twice_is_an_error() -> None:
    class Twice:
        @bkframe.hookimpl
        def bkframe_register_components(self, registry: ComponentRegistry) -> None:
            registry.add_placement_policy("random", lambda config: RandomPlacement(), config=NoConfig)

    pm = PluginManager(load_entry_points=False, extra_plugins=[Twice()])
    with pytest.raises(PluginError, match="placement_policy 'random' is registered twice"):
        pm.components  # noqa: B018 - building the registry is what fails


def test_rack_aware_search_of_an_impossible_shape_ends_with_a_best_effort(caplog: pytest.LogCaptureFixture) -> None:
    # Every 7 consecutive bookies of 13 on 7 distinct racks: impossible (13 is no multiple
    # of 7); the bounded search gives up and the fallback still spreads.
    many = [Candidate(f"b{i}", rack=f"r{i % 7}") for i in range(300)]
    with caplog.at_level(logging.WARNING, logger="bkframe.placement"):
        chosen = rack_aware(7).new_ensemble(many, ensemble_size=13, write_quorum=7)
    assert len(set(chosen)) == 13 and "no choice gives every write set 7 racks" in caplog.text
    assert racks_spanned(racks(chosen, many), 7) >= 6
