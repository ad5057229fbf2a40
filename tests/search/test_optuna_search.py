"""The thin Optuna searcher alone: asks, tells, and the points it asks first."""

import optuna

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
