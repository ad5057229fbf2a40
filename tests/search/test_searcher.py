import optuna
import pytest
from ray import tune

from search.searcher import FeasibilityAwareOptunaSearch, build_sampler, build_searcher

OBJECTIVES = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}
SPACE = {"batch_size": tune.choice([16, 32, 64]), "optimizer": tune.choice(["sgd", "adam"])}


FIXED = {"epochs": 2, "model": "small_cnn", "data": {"image_size": 16}}


def searcher_over(space=SPACE, grid=(), sampler=None) -> FeasibilityAwareOptunaSearch:
    searcher = build_searcher(
        OBJECTIVES,
        sampler or optuna.samplers.RandomSampler(seed=0),
        grid=grid,
        fixed_config=FIXED,
    )
    assert searcher.set_search_properties(None, None, {**space, **FIXED})
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


@pytest.mark.parametrize("status", ["oom", "oom_predicted", "diverged"])
def test_a_pruned_trial_reaches_optuna_pruned_and_infeasible_never_complete(status):
    searcher = searcher_over()
    searcher.suggest("a")
    searcher.on_trial_complete("a", result(status=status, throughput=1e9, best_val_acc=1.0))
    (trial,) = searcher.study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert trial.values is None
    assert trial.constraints and all(value > 0 for value in trial.constraints.values())
    assert trial.user_attrs["status"] == status
    assert searcher.study.best_trials == []


def test_after_an_oom_a_config_needing_at_least_as_much_memory_is_marked_to_skip_training():
    searcher = searcher_over(space={"batch_size": tune.choice([64])})
    first = searcher.suggest("a")
    assert "oom_predicted_from" not in first
    searcher.on_trial_complete("a", result(status="oom", batch_size=64))
    second = searcher.suggest("b")
    assert second["oom_predicted_from"] == "a"
    assert set(searcher.failures) == {"a"}


def test_an_oom_because_the_whole_card_was_full_teaches_nothing_about_the_config():
    searcher = searcher_over(space={"batch_size": tune.choice([64])})
    searcher.suggest("a")
    searcher.on_trial_complete("a", result(status="oom", batch_size=64, oom_cause="card"))
    assert "oom_predicted_from" not in searcher.suggest("b")
    assert searcher.failures == {}
    trial = searcher.study.trials[0]
    assert trial.state == optuna.trial.TrialState.PRUNED  # still off the front


def test_a_smaller_config_after_an_oom_still_trains():
    searcher = searcher_over(space={"batch_size": tune.choice([16, 64])}, grid=[
        {"batch_size": 64}, {"batch_size": 16},
    ])  # fmt: skip
    searcher.suggest("big")
    searcher.on_trial_complete("big", result(status="oom", batch_size=64))
    assert "oom_predicted_from" not in searcher.suggest("small")


def test_tpe_samples_on_after_pruned_infeasible_trials_without_error():
    sampler = optuna.samplers.TPESampler(n_startup_trials=2, seed=0)
    searcher = searcher_over(sampler=sampler)
    for index in range(6):
        trial_id = f"t{index}"
        config = searcher.suggest(trial_id)
        status = "oom" if config["batch_size"] == 64 else "ok"
        searcher.on_trial_complete(trial_id, result(status=status, batch_size=config["batch_size"]))
    states = {trial.state for trial in searcher.study.trials}
    assert optuna.trial.TrialState.COMPLETE in states


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


def test_with_repeats_each_sampled_config_comes_again_with_the_next_seeds():
    searcher = build_searcher(
        OBJECTIVES,
        optuna.samplers.RandomSampler(seed=0),
        grid=[{"optimizer": "adam"}],
        fixed_config={**FIXED, "seed": 7},
        repeats=3,
    )
    searcher.set_search_properties(None, None, {**SPACE, **FIXED})
    configs = [searcher.suggest(f"t{i}") for i in range(6)]
    assert [c["seed"] for c in configs] == [7, 8, 9, 7, 8, 9]
    assert [c["repeat_of"] for c in configs] == ["t0"] * 3 + ["t3"] * 3
    first, second = configs[:3], configs[3:]
    assert all(c["optimizer"] == "adam" for c in first)  # the grid point, repeated
    assert len({(c["batch_size"], c["optimizer"]) for c in second}) == 1
    assert len(searcher.study.trials) == 6  # each repeat is its own Optuna trial
