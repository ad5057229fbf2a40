"""`bench/early_stopping_replay.py`'s rules, as written on its command line."""

import importlib.util
import sys

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location(
    "early_stopping_replay", REPO / "bench" / "early_stopping_replay.py"
)
replay_bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = replay_bench  # its dataclasses look their module up
spec.loader.exec_module(replay_bench)
Rule = replay_bench.Rule
SEARCHED = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}


def test_a_rule_compares_on_every_objective_unless_told_which():
    rule = Rule.parse("1,2,4:0.5")
    assert (rule.rungs, rule.keep, rule.min_peers, rule.sees_min_accuracy) == (
        (1, 2, 4),
        0.5,
        3,
        True,
    )
    assert rule.objectives(SEARCHED) == SEARCHED


def test_a_rule_can_compare_trials_at_the_rungs_on_some_objectives_only():
    rule = Rule.parse("1,2,4:0.5:3::throughput, best_val_acc")
    assert rule.objectives(SEARCHED) == {"throughput": "max", "best_val_acc": "max"}
    assert str(rule) == "rungs [1, 2, 4], keep 0.5, on throughput and best_val_acc only"
    assert not Rule.parse("2,4:0.3:4:blind").sees_min_accuracy


def test_a_rule_naming_an_objective_the_search_does_not_have_says_so():
    with pytest.raises(ValueError, match="accuracy not among the search's objectives"):
        Rule.parse("1,2:0.5:3::accuracy").objectives(SEARCHED)
    with pytest.raises(ValueError, match="'blind' or nothing"):
        Rule.parse("1,2:0.5:3:blnd")
