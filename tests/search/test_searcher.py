import optuna
import pytest
from ray import tune

from search.searcher import FeasibilityAwareOptunaSearch, build_sampler, build_searcher

OBJECTIVES = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}
SPACE = {"batch_size": tune.choice([16, 32, 64]), "optimizer": tune.choice(["sgd", "adam"])}


def searcher_over(space=SPACE, grid=()) -> FeasibilityAwareOptunaSearch:
    searcher = build_searcher(OBJECTIVES, optuna.samplers.RandomSampler(seed=0), grid=grid)
    assert searcher.set_search_properties(None, None, {**space, "epochs": 2})
    return searcher


def result(status: str = "ok", **values) -> dict:
    return {"throughput": 100.0, "best_val_acc": 0.7, "gen_gap": 0.1, "status": status, **values}


@pytest.mark.parametrize("samples", [4, 12, 200])
def test_samplers_start_up_for_a_fraction_of_the_search_not_optunas_long_search_default(samples):
    tpe = build_sampler("tpe", samples, seed=0)
    nsga = build_sampler("nsga2", samples, seed=0)
    assert tpe._n_startup_trials <= max(2, samples // 3)
    assert 2 <= nsga._population_size <= max(2, samples // 4)
    assert isinstance(build_sampler("random", samples, seed=0), optuna.samplers.RandomSampler)


def test_a_trial_that_ended_ok_reaches_optuna_complete_with_its_objective_values():
    searcher = searcher_over()
    searcher.suggest("a")
    searcher.on_trial_complete("a", result())
    (trial,) = searcher.study.trials
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.values == [100.0, 0.7, 0.1]


@pytest.mark.parametrize("status", ["oom", "diverged"])
def test_a_trial_that_ran_out_of_memory_or_diverged_is_pruned_not_complete(status):
    searcher = searcher_over()
    searcher.suggest("a")
    searcher.on_trial_complete("a", result(status=status))
    (trial,) = searcher.study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert trial.user_attrs["status"] == status
    assert searcher.study.best_trials == []


def test_a_trial_that_raised_is_failed():
    searcher = searcher_over()
    searcher.suggest("a")
    searcher.on_trial_complete("a", None, error=True)
    assert searcher.study.trials[0].state == optuna.trial.TrialState.FAIL


def test_grid_points_are_suggested_first_and_the_other_keys_are_still_sampled():
    grid = [{"optimizer": "sgd"}, {"optimizer": "adam"}]
    searcher = searcher_over(grid=grid)
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert [first["optimizer"], second["optimizer"]] == ["sgd", "adam"]
    assert first["batch_size"] in (16, 32, 64) and second["batch_size"] in (16, 32, 64)
