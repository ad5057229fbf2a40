"""The thin Optuna searcher alone: asks, tells, and the points it asks first."""

import optuna
import pytest

from search.optuna_search import OptunaAskTell
from search.space import SpaceParam

OBJECTIVES = {"throughput": "max", "best_val_acc": "max"}
SPACE = {"batch_size": SpaceParam("choice", (16, 32, 64)),
         "optimizer": SpaceParam("choice", ("sgd", "adam"))}  # fmt: skip


def asktell(**options) -> OptunaAskTell:
    return OptunaAskTell(SPACE, OBJECTIVES, optuna.samplers.RandomSampler(seed=0), **options)


def test_a_point_asked_next_comes_before_the_grid_and_the_grid_before_samples():
    searcher = asktell(grid=[{"optimizer": "adam"}])
    searcher.ask_next({"batch_size": 64, "optimizer": "sgd"})
    assert searcher.suggest("a") == {"batch_size": 64, "optimizer": "sgd"}
    assert searcher.suggest("b")["optimizer"] == "adam"  # the grid point, the rest sampled
    assert set(searcher.suggest("c")) == {"batch_size", "optimizer"}


def test_what_a_result_notes_beside_its_status_is_kept_on_the_optuna_trial():
    searcher = asktell()
    searcher.suggest("a")
    searcher.on_trial_complete("a", {"status": "oom_predicted", "status_detail": "not started",
                                     "started": False, "predicted_peak_mb": 42.0})  # fmt: skip
    (trial,) = searcher.study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert trial.user_attrs == {
        "started": False, "status": "oom_predicted", "status_detail": "not started",
        "predicted_peak_mb": 42.0,
    }  # fmt: skip


def test_a_trial_it_does_not_know_is_ignored():
    searcher = asktell()
    searcher.on_trial_complete("never-suggested", {"status": "ok"})
    assert searcher.study.trials == []


def test_a_trial_that_learned_nothing_is_told_as_infeasible_by_how_far_below_it_is():
    searcher = asktell(min_accuracy=0.55)
    for trial_id, accuracy in (("chance", 0.5), ("learned", 0.8)):
        searcher.suggest(trial_id)
        searcher.on_trial_complete(trial_id, {"status": "ok", "throughput": 900.0,
                                              "best_val_acc": accuracy})  # fmt: skip
    chance, learned = searcher.study.trials
    assert chance.state == learned.state == optuna.trial.TrialState.COMPLETE
    assert chance.constraints == {"min_accuracy": pytest.approx(0.05)}
    assert learned.constraints == {}
    assert searcher.accuracy_shortfall({"best_val_acc": float("nan")}) == 0.55  # as the report
    assert searcher.accuracy_shortfall({}) == 0.0


def told_like_its_config(min_accuracy: float | None) -> int:
    """TPE over one switch: `a` learns nothing but has no gap, `b` learns with a gap; both
    are on the plain front. How many of 20 suggestions after 10 alike are `b`."""
    searcher = OptunaAskTell(
        {"switch": SpaceParam("choice", ("a", "b"))},
        {"best_val_acc": "max", "gen_gap": "min"},
        optuna.samplers.TPESampler(n_startup_trials=10, seed=0),
        min_accuracy=min_accuracy,
    )
    outcome = {"a": {"best_val_acc": 0.5, "gen_gap": 0.0},
               "b": {"best_val_acc": 0.8, "gen_gap": 0.1}}  # fmt: skip
    chosen = []
    for number in range(30):
        if number < 10:
            searcher.ask_next({"switch": "ab"[number % 2]})
        switch = searcher.suggest(str(number))["switch"]
        searcher.on_trial_complete(str(number), {"status": "ok", **outcome[switch]})
        chosen.append(switch)
    return chosen[10:].count("b")


def test_the_sampler_proposes_away_from_configs_that_learned_nothing():
    assert told_like_its_config(min_accuracy=0.55) >= 18
    assert told_like_its_config(min_accuracy=None) <= 14  # without the bar: both look good
