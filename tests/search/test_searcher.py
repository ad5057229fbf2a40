import pickle

import optuna
import pytest
from ray.tune.search import Searcher

import search.optuna_search as optuna_search
from search.feasibility import MemoryFootprint, MemoryModel, OomForecast, memory_group
from search.searcher import (
    FeasibilityAwareOptunaSearch,
    FeasibilityGate,
    MemoryLearning,
    Repeats,
    build_sampler,
    build_searcher,
    optuna_searcher,
)
from search.space import SpaceParam
from trainables.settings import TrainSettings

OBJECTIVES = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}
SPACE = {
    "batch_size": SpaceParam("choice", (16, 32, 64)),
    "optimizer": SpaceParam("choice", ("sgd", "adam")),
}


FIXED = {"epochs": 2, "model": "small_cnn", "data": {"image_size": 16}}


def searcher_over(space=SPACE, grid=(), sampler=None, fixed=FIXED, memory=None):
    searcher = build_searcher(
        space,
        OBJECTIVES,
        sampler or optuna.samplers.RandomSampler(seed=0),
        grid=grid,
        fixed_config=fixed,
        memory=memory,
    )
    assert searcher.set_search_properties(None, None, {**FIXED})
    return searcher


def result(status: str = "ok", **values) -> dict:
    return {"throughput": 100.0, "best_val_acc": 0.7, "gen_gap": 0.1, "status": status, **values}


def reported(searcher, trial_id: str, *results: dict) -> None:
    """A trial's results reach the searcher as Tune hands them on: each one, then the last
    again when the trial completes."""
    for each in results:
        searcher.on_trial_result(trial_id, each)
    searcher.on_trial_complete(trial_id, results[-1])


def study(searcher) -> optuna.Study:
    return optuna_searcher(searcher).study


def failures(searcher) -> dict:
    return optuna_searcher(searcher).forecast.failures


def started(searcher) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study(searcher).trials if t.user_attrs.get("started")]


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
    (trial,) = study(searcher).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.values == [100.0, 0.7, 0.1]


@pytest.mark.parametrize("status", ["oom", "oom_predicted", "diverged"])
def test_a_pruned_trial_reaches_optuna_pruned_and_infeasible_never_complete(status):
    searcher = searcher_over()
    searcher.suggest("a")
    searcher.on_trial_complete("a", result(status=status, throughput=1e9, best_val_acc=1.0))
    (trial,) = study(searcher).trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert trial.values is None
    assert trial.constraints and all(value > 0 for value in trial.constraints.values())
    assert trial.user_attrs["status"] == status
    assert study(searcher).best_trials == []


def test_after_an_oom_a_config_needing_at_least_as_much_memory_is_never_started():
    searcher = searcher_over(space={"batch_size": SpaceParam("choice", (16, 64))},
                             grid=[{"batch_size": 64}])  # fmt: skip
    assert searcher.suggest("a")["batch_size"] == 64
    searcher.on_trial_complete("a", result(status="oom", physical_batch_size=64))
    for trial_id in "bcde":  # every suggestion Tune gets from now on fits
        config = searcher.suggest(trial_id)
        assert config["batch_size"] == 16 and "oom_predicted_from" not in config
        searcher.on_trial_complete(trial_id, result())
    skipped = [t for t in study(searcher).trials if t.user_attrs.get("started") is False]
    assert skipped, "no suggestion of batch 64 came after the OOM"
    for trial in skipped:
        assert trial.params["batch_size"] == 64
        assert trial.state == optuna.trial.TrialState.PRUNED
        assert trial.user_attrs["status"] == "oom_predicted"
        assert "trial a ran out of memory" in trial.user_attrs["status_detail"]
        assert trial.constraints and all(v > 0 for v in trial.constraints.values())
    assert set(failures(searcher)) == {"a"}


def test_when_every_config_is_over_budget_tune_still_gets_one_that_ends_at_once():
    searcher = searcher_over(space={"batch_size": SpaceParam("choice", (64,))})
    searcher.suggest("a")
    searcher.on_trial_complete("a", result(status="oom", physical_batch_size=64))
    assert searcher.suggest("b")["oom_predicted_from"].startswith("trial a ran out of memory")


class LineProbe:
    """A memory probe whose step needs `base + per_image x batch` MiB."""

    def __init__(self, base: float, per_image: float) -> None:
        self.base, self.per_image, self.calls = base, per_image, 0

    def __call__(self, settings):
        self.calls += 1
        return lambda batch: self.base + self.per_image * batch


def test_a_suggestion_predicted_over_its_budget_is_skipped_before_any_trial_starts():
    probe = LineProbe(base=10, per_image=0.5)  # batch 64: 42 MiB, over 40; 16 and 32 fit
    searcher = searcher_over(fixed={**FIXED, "memory_budget_mb": 40},
                             memory=MemoryModel(probe=probe))  # fmt: skip
    configs = [searcher.suggest(f"t{i}") for i in range(8)]
    assert {c["batch_size"] for c in configs} <= {16, 32}
    # the prediction travels with the trial, to be set beside what it measures
    assert all(c["predicted_peak_mb"] == 10 + 0.5 * c["batch_size"] for c in configs)
    skipped = [t for t in study(searcher).trials if t.user_attrs.get("started") is False]
    assert skipped and all(t.params["batch_size"] == 64 for t in skipped)
    assert skipped[0].user_attrs["predicted_peak_mb"] == 42.0
    assert skipped[0].user_attrs["allowed_mb"] == 40
    assert "predicted to need 42 MiB" in skipped[0].user_attrs["status_detail"]
    assert probe.calls == 2  # once per memory group (sgd and adam keep different state)


def test_without_a_probe_the_line_is_fitted_to_the_peaks_the_trials_reported():
    searcher = searcher_over(
        space={"batch_size": SpaceParam("choice", (16, 32, 64))},
        grid=[{"batch_size": 16}, {"batch_size": 32}],
        fixed={**FIXED, "optimizer": "sgd", "memory_budget_mb": 40},
        memory=MemoryModel(),
    )
    for trial_id, peak in (("a", 20.0), ("b", 30.0)):  # 10 + 10 MiB per 16 images
        config = searcher.suggest(trial_id)
        first = result(epoch=1, physical_batch_size=config["batch_size"], peak_mem_mb=peak)
        reported(searcher, trial_id, first)
    assert {searcher.suggest(f"t{i}")["batch_size"] for i in range(6)} <= {16, 32}
    skipped = [t for t in study(searcher).trials if t.user_attrs.get("started") is False]
    assert skipped and skipped[0].user_attrs["predicted_peak_mb"] == pytest.approx(50.0)


def test_on_a_gpu_the_reserved_peaks_and_the_reported_limit_decide_without_a_budget():
    """A 0.25 share and no budget: the limit (share less the process's context) comes with
    the first report; the line goes through what the steps reserved, not their tensors."""
    searcher = searcher_over(
        space={"batch_size": SpaceParam("choice", (16, 32, 64))},
        grid=[{"batch_size": 16}, {"batch_size": 32}],
        fixed={**FIXED, "optimizer": "sgd"},
        memory=MemoryModel(on_gpu=True),
    )
    for trial_id, reserved in (("a", 20.0), ("b", 30.0)):  # 10 + 10 MiB per 16 images
        config = searcher.suggest(trial_id)
        reported(searcher, trial_id, result(
            epoch=1, physical_batch_size=config["batch_size"], peak_mem_mb=reserved / 2,
            peak_reserved_mb=reserved, memory_limit_mb=40.0,
        ))  # fmt: skip
    assert {searcher.suggest(f"t{i}")["batch_size"] for i in range(6)} <= {16, 32}
    skipped = [t for t in study(searcher).trials if t.user_attrs.get("started") is False]
    assert skipped and skipped[0].user_attrs["predicted_peak_mb"] == pytest.approx(50.0)
    assert skipped[0].user_attrs["allowed_mb"] == 40


def test_the_memory_model_learns_from_the_first_epoch_not_from_later_reserved_peaks():
    """After epoch 1 the reserved peak also holds blocks evaluation left cached: only the
    first epoch's step, from an empty cache, is what a new trial's first step reserves."""
    memory = MemoryModel(on_gpu=True)
    searcher = searcher_over(
        space={"batch_size": SpaceParam("choice", (16, 32, 64))},
        grid=[{"batch_size": 16}, {"batch_size": 32}],
        fixed={**FIXED, "optimizer": "sgd"},
        memory=memory,
    )
    for trial_id, reserved in (("a", 20.0), ("b", 30.0)):
        config = searcher.suggest(trial_id)
        epochs = [
            result(epoch=epoch, physical_batch_size=config["batch_size"],
                   peak_reserved_mb=reserved * epoch, memory_limit_mb=100.0)
            for epoch in (1, 2, 3)
        ]  # fmt: skip
        reported(searcher, trial_id, *epochs)
    settings = TrainSettings.from_config({**FIXED, "optimizer": "sgd", "batch_size": 64})
    assert memory.predict(settings).predicted_mb == pytest.approx(50.0)  # not epoch 3's


def test_a_trial_stopped_early_is_pruned_but_not_marked_infeasible():
    searcher = searcher_over()
    searcher.suggest("a")
    searcher.on_trial_complete("a", result(status="stopped_early"))
    (trial,) = study(searcher).trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert not trial.constraints
    assert trial.user_attrs["status"] == "stopped_early"


def persistent_searcher(tmp_path):
    """A searcher whose study lives in a file, as a search's does."""
    return build_searcher(SPACE, OBJECTIVES, optuna.samplers.RandomSampler(seed=0),
                          fixed_config=FIXED, storage=f"sqlite:///{tmp_path / 'optuna.db'}",
                          study_name="s")  # fmt: skip


def test_a_saved_searcher_restored_in_a_new_object_continues_the_same_study(tmp_path):
    first = persistent_searcher(tmp_path)
    first.suggest("a")
    first.suggest("b")
    first.on_trial_complete("a", result())
    first.save(str(tmp_path / "searcher.pkl"))
    first.suggest("orphan")  # started after the save: the driver is then killed
    second = persistent_searcher(tmp_path)
    second.restore(str(tmp_path / "searcher.pkl"))
    second.on_trial_complete("b", result())
    states = [t.state for t in study(second).trials]
    assert states == [optuna.trial.TrialState.COMPLETE] * 2 + [optuna.trial.TrialState.FAIL]


def test_an_oom_because_the_whole_card_was_full_teaches_nothing_about_the_config():
    searcher = searcher_over(space={"batch_size": SpaceParam("choice", (64,))})
    searcher.suggest("a")
    searcher.on_trial_complete("a", result(status="oom", physical_batch_size=64, oom_cause="card"))
    assert "oom_predicted_from" not in searcher.suggest("b")
    assert failures(searcher) == {}
    trial = study(searcher).trials[0]
    assert trial.state == optuna.trial.TrialState.PRUNED  # still off the front


def test_a_smaller_config_after_an_oom_still_trains():
    searcher = searcher_over(space={"batch_size": SpaceParam("choice", (16, 64))}, grid=[
        {"batch_size": 64}, {"batch_size": 16},
    ])  # fmt: skip
    searcher.suggest("big")
    searcher.on_trial_complete("big", result(status="oom", physical_batch_size=64))
    assert "oom_predicted_from" not in searcher.suggest("small")


def test_tpe_samples_on_after_pruned_infeasible_trials_without_error():
    sampler = optuna.samplers.TPESampler(n_startup_trials=2, seed=0)
    searcher = searcher_over(sampler=sampler)
    for index in range(6):
        trial_id = f"t{index}"
        config = searcher.suggest(trial_id)
        status = "oom" if config["batch_size"] == 64 else "ok"
        searcher.on_trial_complete(
            trial_id, result(status=status, physical_batch_size=config["batch_size"])
        )
    states = {trial.state for trial in study(searcher).trials}
    assert optuna.trial.TrialState.COMPLETE in states


def test_a_trial_that_raised_is_failed():
    searcher = searcher_over()
    searcher.suggest("a")
    searcher.on_trial_complete("a", None, error=True)
    assert study(searcher).trials[0].state == optuna.trial.TrialState.FAIL


def test_grid_points_are_suggested_first_and_the_other_keys_are_still_sampled():
    grid = [{"optimizer": "sgd"}, {"optimizer": "adam"}]
    searcher = searcher_over(grid=grid)
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert [first["optimizer"], second["optimizer"]] == ["sgd", "adam"]
    assert first["batch_size"] in (16, 32, 64) and second["batch_size"] in (16, 32, 64)


def test_with_repeats_each_sampled_config_comes_again_with_the_next_seeds():
    searcher = build_searcher(
        SPACE,
        OBJECTIVES,
        optuna.samplers.RandomSampler(seed=0),
        grid=[{"optimizer": "adam"}],
        fixed_config={**FIXED, "seed": 7},
        repeats=3,
    )
    configs = [searcher.suggest(f"t{i}") for i in range(6)]
    assert [c["seed"] for c in configs] == [7, 8, 9, 7, 8, 9]
    assert [c["repeat_of"] for c in configs] == ["t0"] * 3 + ["t3"] * 3
    first, second = configs[:3], configs[3:]
    assert all(c["optimizer"] == "adam" for c in first)  # the grid point, repeated
    assert len({(c["batch_size"], c["optimizer"]) for c in second}) == 1
    assert len(study(searcher).trials) == 6  # each repeat is its own Optuna trial


def test_a_trial_told_after_the_last_save_is_not_told_twice_when_tune_runs_it_again(tmp_path):
    first = persistent_searcher(tmp_path)
    first.suggest("a")
    first.save(str(tmp_path / "searcher.pkl"))
    first.on_trial_complete("a", result())  # told, then the driver dies before a save
    second = persistent_searcher(tmp_path)
    second.restore(str(tmp_path / "searcher.pkl"))
    second.on_trial_complete("a", result(best_val_acc=0.9))  # Tune's rerun: nothing raises
    (trial,) = study(second).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.values[1] == 0.7


def learning_search(memory_budget_mb: float = 40):
    """TPE after 4 random start-up trials, over batches whose steps need 10 + 0.5 MiB an
    image (`LineProbe`): 64 and 128 are over 40 MiB. Larger batches report more throughput,
    so what the sampler learns pulls it toward them."""
    space = {"batch_size": SpaceParam("choice", (16, 32, 64, 128)),
             "lr": SpaceParam.parse({"loguniform": [1e-3, 1e-1]})}  # fmt: skip
    searcher = searcher_over(
        space=space,
        sampler=optuna.samplers.TPESampler(n_startup_trials=4, seed=0, multivariate=True),
        fixed={**FIXED, "optimizer": "sgd", "memory_budget_mb": memory_budget_mb},
        memory=MemoryModel(probe=LineProbe(base=10, per_image=0.5)),
    )
    for index in range(24):
        config = searcher.suggest(f"t{index}")
        searcher.on_trial_complete(f"t{index}", result(throughput=10.0 * config["batch_size"]))
    return searcher


def suggested_over_budget_after_start_up(searcher) -> int:
    return sum(trial.user_attrs.get("started") is False for trial in study(searcher).trials[4:])


def test_a_learning_sampler_asked_again_suggests_half_as_many_configs_that_run_out(
    monkeypatch,
):
    asked_again = learning_search()
    monkeypatch.setattr(optuna_search, "CANDIDATES_PER_SUGGESTION", 1)  # asked once
    asked_once = learning_search()
    assert suggested_over_budget_after_start_up(asked_once) >= 6
    assert suggested_over_budget_after_start_up(asked_again) * 2 <= (
        suggested_over_budget_after_start_up(asked_once)
    )
    assert len(started(asked_again)) == 24  # every trial it started fits


def test_the_sampler_judges_by_what_the_searcher_learns_also_after_a_restore(tmp_path):
    first = persistent_searcher(tmp_path)
    first.suggest("a")
    first.on_trial_complete("a", result(status="oom", physical_batch_size=64))
    first.save(str(tmp_path / "searcher.pkl"))
    second = persistent_searcher(tmp_path)
    second.restore(str(tmp_path / "searcher.pkl"))
    assert list(failures(second)) == ["a"]  # kept with the study's sampler, which judges
    config = second.suggest("b")  # and the gate above it judges by the same
    assert config["batch_size"] < 64 or "oom_predicted_from" in config


def saved_before_the_stack(searcher, forecast_as_two: bool = False) -> dict:
    """The state a search saved before the stack: the one searcher's attributes, as it
    named them (and, before `OomForecast`, its failures and memory model as two)."""
    memory = searcher.searcher  # under the stack's top, `InOrder`, which came after
    gate = memory.searcher
    repeats, asktell = gate.searcher, gate.searcher.searcher
    settings = memory._live
    old = {
        "_metric": asktell.metric, "_mode": asktell.mode,
        "_distributions": asktell.distributions, "_objectives": asktell._objectives,
        "_fixed_config": gate.fixed_config, "_study": asktell.study, "_grid": asktell._grid,
        "_base_seed": repeats.base_seed, "_repeats": repeats.repeats,
        "_pending_repeats": repeats._pending,
        "_live": {tid: (trial, settings[tid]) for tid, trial in asktell._live.items()},
        "_forecast": gate.forecast,
    }  # fmt: skip
    if forecast_as_two:  # as then, the study's sampler was Optuna's own
        forecast = old.pop("_forecast")
        old |= {"_failures": forecast.failures, "_memory": forecast.memory}
        asktell.study.sampler = asktell.study.sampler.inner
    return old


@pytest.mark.parametrize("forecast_as_two", [False, True])
def test_a_search_saved_before_the_stack_restores_what_ran_out_and_what_is_running(
    tmp_path, forecast_as_two
):
    first = persistent_searcher(tmp_path)
    first.suggest("a")
    first.on_trial_complete("a", result(status="oom", physical_batch_size=64))
    first.suggest("running")
    with open(tmp_path / "old.pkl", "wb") as handle:
        pickle.dump(saved_before_the_stack(first, forecast_as_two), handle)
    second = persistent_searcher(tmp_path)
    second.restore(str(tmp_path / "old.pkl"))
    assert list(failures(second)) == ["a"]
    assert isinstance(study(second).sampler, optuna_search.FeasibleCandidates)
    second.on_trial_complete("running", result())  # the trial it was running is told
    assert study(second).trials[-1].state == optuna.trial.TrialState.COMPLETE
    config = second.suggest("b")
    assert config["batch_size"] < 64 or "oom_predicted_from" in config


def test_the_searcher_a_search_pickled_before_the_stack_unpickles_as_the_stack(tmp_path):
    """A search started before the stack holds its searcher pickled in its tuner.pkl."""
    first = persistent_searcher(tmp_path)
    first.suggest("a")
    first.on_trial_complete("a", result(status="oom", physical_batch_size=64))
    pickled_then = FeasibilityAwareOptunaSearch.__new__(FeasibilityAwareOptunaSearch)
    pickled_then.__dict__.update(saved_before_the_stack(first))  # what its pickle holds
    resumed = pickle.loads(pickle.dumps(pickled_then))
    assert list(failures(resumed)) == ["a"]
    resumed.save(str(tmp_path / "searcher.pkl"))  # and it saves as the stack does
    again = persistent_searcher(tmp_path)
    again.restore(str(tmp_path / "searcher.pkl"))
    assert list(failures(again)) == ["a"]


@pytest.mark.parametrize("kind", ["nsga2", "tpe"])
def test_each_learning_sampler_runs_whole_searches_through_the_wrapper(kind):
    searcher = searcher_over(sampler=build_sampler(kind, 8, seed=0))
    assert isinstance(study(searcher).sampler, optuna_search.FeasibleCandidates)
    for index in range(10):  # past NSGA-II's first generation and TPE's start-up
        config = searcher.suggest(f"t{index}")
        searcher.on_trial_complete(f"t{index}", result(throughput=float(config["batch_size"])))
    assert len(started(searcher)) == 10


# --- each wrapper alone, over a searcher that records what reaches it -----------------------


class Recording(Searcher):
    """An inner searcher that suggests `configs` in turn and records what it is told."""

    def __init__(self, *configs: dict, forecast: OomForecast | None = None) -> None:
        super().__init__(metric=list(OBJECTIVES), mode=list(OBJECTIVES.values()))
        self.configs, self.asked_next, self.told = list(configs), [], []
        self.forecast = forecast or OomForecast()  # as the Optuna searcher keeps it

    def ask_next(self, params: dict) -> None:
        self.asked_next.append(params)

    def suggest(self, trial_id: str) -> dict:
        return dict(self.asked_next.pop(0) if self.asked_next else self.configs.pop(0))

    def on_trial_complete(self, trial_id, result=None, error=False) -> None:
        self.told.append((trial_id, result))


def test_repeats_ask_the_inner_searcher_for_the_same_params_with_the_next_seeds():
    inner = Recording({"batch_size": 16}, {"batch_size": 32})
    repeats = Repeats(inner, repeats=2, base_seed=5)
    configs = [repeats.suggest(trial_id) for trial_id in ("a", "b", "c")]
    assert configs == [
        {"batch_size": 16, "seed": 5, "repeat_of": "a"},
        {"batch_size": 16, "seed": 6, "repeat_of": "a"},
        {"batch_size": 32, "seed": 5, "repeat_of": "c"},
    ]


def test_repeats_drop_the_seeds_of_a_config_that_was_never_started():
    inner = Recording({"batch_size": 64}, {"batch_size": 16})
    repeats = Repeats(inner, repeats=3, base_seed=0)
    repeats.suggest("a")
    repeats.on_trial_complete("a", {"status": "oom_predicted", "started": False})
    assert repeats.suggest("a") == {"batch_size": 16, "seed": 0, "repeat_of": "a"}
    assert inner.told == [("a", {"status": "oom_predicted", "started": False})]


def test_the_gate_tells_the_inner_searcher_a_suggestion_that_will_run_out_and_asks_again():
    forecast = OomForecast()
    forecast.failures["old"] = MemoryFootprint.of(TrainSettings.from_config(
        {**FIXED, "batch_size": 64}))  # fmt: skip
    inner = Recording({"batch_size": 64}, {"batch_size": 16}, forecast=forecast)
    gate = FeasibilityGate(inner, FIXED)
    assert gate.suggest("t") == {"batch_size": 16}
    ((trial_id, told),) = inner.told
    assert trial_id == "t" and told["status"] == "oom_predicted" and told["started"] is False
    assert told["status_detail"].startswith("not started: trial old ran out of memory")


def test_memory_learning_learns_from_the_first_epoch_and_from_an_out_of_memory_end():
    forecast = OomForecast(MemoryModel(on_gpu=True))
    inner = Recording({"batch_size": 16}, {"batch_size": 32}, forecast=forecast)
    learning = MemoryLearning(inner, FIXED)
    learning.suggest("a")
    learning.on_trial_result("a", result(epoch=1, physical_batch_size=16,
                                         peak_reserved_mb=20.0, memory_limit_mb=40.0))  # fmt: skip
    learning.on_trial_result("a", result(epoch=2, physical_batch_size=16, peak_reserved_mb=99.0))
    learning.on_trial_complete("a", result(epoch=2))
    learning.suggest("b")
    learning.on_trial_complete("b", result(status="oom", physical_batch_size=32))
    assert set(forecast.failures) == {"b"}
    assert [trial_id for trial_id, _ in inner.told] == ["a", "b"]  # and passed on
    group = memory_group(MemoryFootprint.of(TrainSettings.from_config({**FIXED, "batch_size": 16})))
    assert forecast.memory._measured[group] == {16: 20.0}  # epoch 1's, not epoch 2's 99


def test_tune_saves_the_stack_layer_by_layer_and_restores_all_it_learned(tmp_path):
    """As Tune's SearchGenerator does: each layer's state, the Optuna searcher on its own."""
    from ray.tune.search import SearchGenerator

    first = build_searcher(SPACE, OBJECTIVES, optuna.samplers.RandomSampler(seed=0),
                           fixed_config=FIXED, storage=f"sqlite:///{tmp_path / 'optuna.db'}",
                           study_name="s", repeats=2)  # fmt: skip
    first.suggest("a")  # its repeat waits
    first.on_trial_complete("a", result(status="oom", physical_batch_size=64))
    generator = SearchGenerator(first)
    generator.save_to_dir(str(tmp_path), session_str="x")
    second = build_searcher(SPACE, OBJECTIVES, optuna.samplers.RandomSampler(seed=0),
                            fixed_config=FIXED, storage=f"sqlite:///{tmp_path / 'optuna.db'}",
                            study_name="s", repeats=2)  # fmt: skip
    SearchGenerator(second).restore_from_dir(str(tmp_path))
    assert list(failures(second)) == ["a"]
    assert second.suggest("b")["repeat_of"] == "a"  # the waiting repeat comes next
