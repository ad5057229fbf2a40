from pathlib import Path

import pytest
import yaml

from search.config import SearchConfig, load_config
from search.errors import ConfigError
from tests.conftest import CONFIGS

SHIPPED = sorted(CONFIGS.glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def problems_of(path: Path, overrides=(), flags=None) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides, flags=flags)
    assert str(path) in caught.value.render()
    return {problem.path: problem.message for problem in caught.value.problems}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_validates_and_opens_with_the_command_that_runs_it(path: Path):
    config = load_config(path)
    assert isinstance(config, SearchConfig)
    first_line = path.read_text().splitlines()[0]
    assert first_line == f"# python -m search.run --config configs/{path.name}"


def test_a_misspelled_key_a_string_batch_size_and_a_negative_lr_are_reported_together(tmp_path):
    path = write(
        tmp_path,
        """
name: broken
train: {batch_sise: 32, lr: -0.1}
space:
  batch_size: {choice: [16, big]}
""",
    )
    problems = problems_of(path)
    assert problems == {
        "train.batch_sise": "unknown key; did you mean 'batch_size'?",
        "train.lr": "must be > 0.0, got -0.1",
        "space.batch_size.choice[1]": "must be a whole number, got 'big'",
    }


def test_problems_in_every_section_are_collected_into_one_error(tmp_path):
    path = write(
        tmp_path,
        """
name: broken
data: {image_size: 8}
search: {num_sampels: 3, sampler: bayes}
resources: {gpu: 1.5}
tracking: {uri: ./mlruns}
space: {lr: {loguniform: [0, 1]}, epochs: {between: [1, 2]}}
""",
    )
    problems = problems_of(path)
    assert set(problems) == {
        "data.image_size",
        "search.num_sampels",
        "search.sampler",
        "resources.gpu",
        "tracking.uri",
        "space.lr",
        "space.epochs",
    }
    assert problems["search.num_sampels"] == "unknown key; did you mean 'num_samples'?"
    assert "low > 0" in problems["space.lr"]
    assert "unknown kind 'between'" in problems["space.epochs"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "is empty"),
        ("name: [unclosed", "is not valid YAML: line 1"),
        ("- just\n- a list\n", "must be a mapping of sections"),
        ("train: {}\n", "is required but missing"),
    ],
)
def test_a_file_that_is_not_a_config_says_why(tmp_path, text, expected):
    problems = problems_of(write(tmp_path, text))
    assert expected in " ".join(problems.values())


def test_a_missing_file_is_one_clear_problem(tmp_path):
    assert problems_of(tmp_path / "nope.yaml") == {"": "file not found"}


def test_a_sampled_key_must_be_a_trainable_key_and_not_also_fixed(tmp_path):
    path = write(
        tmp_path,
        "name: x\ntrain: {lr: 0.1}\nspace: {lr: {choice: [0.1]}, batchsize: {choice: [1]}}\n",
    )
    problems = problems_of(path)
    assert "also fixed in train.lr" in problems["space.lr"]
    assert "did you mean 'batch_size'" in problems["space.batchsize"]


def test_grid_combinations_must_fit_in_the_number_of_samples(tmp_path):
    path = write(
        tmp_path,
        "name: x\nsearch: {num_samples: 3}\n"
        "space: {optimizer: {grid: [sgd, adam]}, batch_size: {grid: [8, 16]}}\n",
    )
    assert "4 grid combinations" in problems_of(path)["search.num_samples"]


def test_command_line_overrides_and_flags_replace_values_and_can_stop_sampling_a_key(tmp_path):
    config = load_config(
        CONFIGS / "smoke.yaml",
        ["train.epochs=1", "space.lr=null", "space.batch_size={choice: [8, 32]}"],
        flags={"search.num_samples": 2},
    )
    assert config.train["epochs"] == 1
    assert "lr" not in config.space
    assert config.space["batch_size"].values == (8, 32)
    assert config.search.num_samples == 2


def test_bad_overrides_are_problems_like_any_other(tmp_path):
    problems = problems_of(CONFIGS / "smoke.yaml", ["train.epochs=0", "nonsense", "name.inner=1"])
    assert problems["train.epochs"] == "must be > 0, got 0 (set on the command line)"
    assert "key.path=value" in problems["nonsense"]
    assert "not a mapping" in problems["name.inner"]


def test_a_problem_says_whether_its_key_was_set_on_the_command_line_or_in_the_file(tmp_path):
    path = write(tmp_path, "name: bad\ntrain:\n  lr: -1\n")
    problems = problems_of(
        path, ["train.epochs=two", "space.batch_size={choice: [big]}"], flags={"search.seed": "x"}
    )
    assert problems["train.lr"] == "must be > 0.0, got -1"
    assert problems["train.epochs"].endswith("got 'two' (set on the command line)")
    assert problems["space.batch_size.choice[0]"].endswith("(set on the command line)")
    assert problems["search.seed"].endswith("(set on the command line)")
    problems = problems_of(path, ["serch.seed=1", "nonsense"])
    assert problems["serch"].endswith("(set on the command line)")
    assert "(set on the command line)" not in problems["nonsense"]  # it says so already


def test_hypervolume_bounds_must_name_an_objective_and_rise(tmp_path):
    problems = problems_of(
        CONFIGS / "smoke.yaml",
        ["search.hypervolume_bounds={throughput: [0, 5000], lr: [0, 1], gen_gap: [1, -1]}"],
    )
    assert "is not one of search.objectives" in problems["search.hypervolume_bounds.lr"]
    assert "needs low < high" in problems["search.hypervolume_bounds.gen_gap"]
    assert "search.hypervolume_bounds.throughput" not in problems


def test_relative_paths_resolve_against_the_directory_the_command_ran_in(tmp_path):
    config = load_config(CONFIGS / "smoke.yaml", ["tracking.uri=sqlite:///db/m.db"], cwd=tmp_path)
    assert config.run.storage_path == str((tmp_path / "ray_results").resolve())
    assert config.tracking.uri == f"sqlite:///{tmp_path}/db/m.db"
    assert config.tracking.experiment == "smoke"


def test_the_default_tracking_store_is_an_absolute_sqlite_file_in_the_working_directory(tmp_path):
    config = load_config(CONFIGS / "smoke.yaml", cwd=tmp_path)
    assert config.tracking.uri == f"sqlite:///{tmp_path}/mlflow.db"


def test_the_resolved_config_round_trips_through_yaml(tmp_path):
    config = load_config(CONFIGS / "cats_dogs.yaml", cwd=tmp_path)
    path = tmp_path / "resolved.yaml"
    path.write_text(yaml.safe_dump(config.as_yaml_dict()))
    assert load_config(path, cwd=tmp_path).model_dump(exclude={"source"}) == config.model_dump(
        exclude={"source"}
    )


def test_the_config_is_frozen():
    config = load_config(CONFIGS / "smoke.yaml")
    with pytest.raises(Exception, match="frozen"):
        config.name = "other"


def test_repeats_must_divide_the_samples_and_leave_the_seed_to_the_search(tmp_path):
    path = write(
        tmp_path,
        "name: x\nsearch: {num_samples: 5, repeats: 2}\nspace: {seed: {choice: [0, 1]}}\n",
    )
    problems = problems_of(path)
    assert "multiple of search.repeats (2)" in problems["search.num_samples"]
    assert "search.repeats sets the seeds" in problems["space.seed"]


def test_a_lag_below_the_trials_at_once_is_refused_for_it_would_leave_slots_idle(tmp_path):
    path = write(tmp_path, "name: x\nsearch: {max_concurrent_trials: 4, lag: 2}\n")
    assert problems_of(path)["search.lag"] == (
        "must be at least search.max_concurrent_trials (4): a trial waits for those 2 or more "
        "places before it, so at most 2 would run at once, got 2"
    )


def test_a_negative_data_seed_is_a_config_error_not_a_numpy_traceback(tmp_path):
    path = write(tmp_path, "name: seeded\n")
    assert problems_of(path, ["data.seed=-1"])["data.seed"].startswith("must be >= 0, got -1")


def test_determinism_and_the_cudnn_autotuner_cannot_both_hold(tmp_path):
    fixed = write(tmp_path, "name: exact\ntrain: {deterministic: true, cudnn_benchmark: true}\n")
    assert "turn one of the two off" in problems_of(fixed)["train"]
    sampled = write(
        tmp_path,
        "name: exact\ntrain: {deterministic: true}\n"
        "space:\n  cudnn_benchmark: {choice: [false, true]}\n",
    )
    assert "both true" in problems_of(sampled)["space.cudnn_benchmark"]


def test_early_stopping_rungs_must_increase_and_come_before_the_last_epoch(tmp_path):
    path = write(tmp_path, "name: early\ntrain: {epochs: 4}\n")
    assert (
        "increasing epochs"
        in problems_of(path, ["search.early_stopping={rungs: [3, 2]}"])[
            "search.early_stopping.rungs"
        ]
    )
    late = problems_of(path, ["search.early_stopping={rungs: [2, 4]}"])
    assert late["search.early_stopping.rungs"].startswith(
        "must be below train.epochs (4): a rung at the last epoch or later saves nothing, "
        "got [4]; set search.early_stopping.rungs=[2], or train.epochs=5 or more"
    )
    none_left = problems_of(path, ["search.early_stopping={rungs: [4, 5]}"])
    message = none_left["search.early_stopping.rungs"]
    assert "got [4, 5]; set search.early_stopping=null, or train.epochs=6 or more" in message
    keep = problems_of(path, ["search.early_stopping={rungs: [2], keep: 0}"])
    assert "search.early_stopping.keep" in keep
    spared = problems_of(path, ["search.early_stopping={rungs: [1, 2], slow_start_rungs: 3}"])
    assert spared["search.early_stopping.slow_start_rungs"].startswith(
        "must be at most the number of rungs (2: [1, 2]), got 3"
    )


def test_early_stopping_takes_its_defaults_and_can_be_turned_off(tmp_path):
    path = write(tmp_path, "name: early\ntrain: {epochs: 8}\nsearch: {early_stopping: {}}\n")
    stopping = load_config(path).search.early_stopping
    assert stopping is not None and stopping.rungs == (1, 2, 4) and stopping.keep == 0.5
    assert load_config(path, ["search.early_stopping=null"]).search.early_stopping is None


def test_early_stopping_leaves_the_param_space_as_it_was_so_that_older_searches_restore(
    tmp_path,
):
    from search.tuner import param_space

    path = write(tmp_path, "name: early\ntrain: {epochs: 8}\nsearch: {early_stopping: {}}\n")
    on, off = load_config(path), load_config(path, ["search.early_stopping=null"])
    assert on.rungs() == (1, 2, 4) and off.rungs() == ()
    assert param_space(on).keys() == param_space(off).keys()  # Tuner.restore compares them


def test_a_search_trial_scores_its_gaps_at_the_rungs_and_at_the_epochs_its_config_asks_for(
    monkeypatch,
):
    import search.trainable as trainable

    trained = {}
    monkeypatch.setattr(trainable, "train_classifier", lambda config, data: trained.update(config))
    trainable.classifier_trial({"lr": 0.1, "gap_epochs": [3, 4]}, None, rungs=(2, 4))
    assert trained == {"lr": 0.1, "gap_epochs": [2, 3, 4]}
    trained.clear()
    trainable.classifier_trial({"lr": 0.1}, None)  # early stopping off: nothing added
    assert trained == {"lr": 0.1}
    trained.clear()  # warming up over 2 epochs: the rungs at its epochs at full rate
    trainable.classifier_trial({"warmup_epochs": 2}, None, rungs=(1, 2, 4))
    assert trained == {"warmup_epochs": 2, "gap_epochs": [3, 4, 6]}
    trained.clear()
    trainable.classifier_trial({"amp": True, "speed_baseline_json": '{"amp": false}'}, None)
    assert trained == {"amp": True, "speed_baseline": {"amp": False}}  # an ablation's note


def test_early_stopping_is_decided_by_accuracy_where_it_is_an_objective_else_by_any(tmp_path):
    path = write(tmp_path, "name: early\ntrain: {epochs: 8}\nsearch: {early_stopping: {}}\n")
    stopping = load_config(path).search.early_stopping
    assert stopping.ahead_on == "auto"
    assert stopping.effective_ahead_on({"throughput": "max", "best_val_acc": "max"}) == (
        "best_val_acc",
    )
    assert stopping.effective_ahead_on({"peak_mem_mb": "min"}) is None
    anyone = load_config(path, ["search.early_stopping.ahead_on=null"]).search.early_stopping
    assert anyone.effective_ahead_on({"best_val_acc": "max"}) is None
    assert stopping.slow_start_rungs == 0  # a trial at chance is stopped at its first rung
    problems = problems_of(path, ["search.early_stopping.slow_start_rungs=-1"])
    assert problems["search.early_stopping.slow_start_rungs"].startswith("must be >= 0, got -1")


def test_the_main_config_takes_other_objectives_and_its_saved_copy_loads_again(tmp_path):
    other = ["search.objectives={throughput: max, peak_mem_mb: min}"]
    config = load_config(CONFIGS / "cats_dogs.yaml", other)
    search = config.search
    assert search.early_stopping.effective_ahead_on(search.objectives) is None
    saved = tmp_path / "resolved_config.yaml"  # as a search saves it, and MLflow logs it
    saved.write_text(yaml.safe_dump(config.as_yaml_dict()))
    assert load_config(saved).search.early_stopping.ahead_on == "auto"


def test_early_stopping_ahead_on_names_objectives_when_set(tmp_path):
    path = write(tmp_path, "name: early\ntrain: {epochs: 8}\nsearch: {early_stopping: {}}\n")
    problems = problems_of(path, ["search.early_stopping.ahead_on=[best_val_acc, test_acc]"])
    assert "got ['test_acc']" in problems["search.early_stopping.ahead_on"]
    typo = problems_of(path, ["search.early_stopping.ahead_on=autox"])
    assert typo["search.early_stopping.ahead_on"].startswith(
        "must be auto, null or a list of objectives, got 'autox'"
    )


def test_early_stopping_needs_objectives_scored_every_epoch_and_one_seed_per_config(tmp_path):
    path = write(tmp_path, "name: early\ntrain: {epochs: 8}\nsearch: {early_stopping: {}}\n")
    problems = problems_of(path, ["search.objectives={test_acc: max}"])
    assert "['test_acc']" in problems["search.early_stopping"]
    repeated = problems_of(path, ["search.repeats=2", "search.num_samples=4"])
    assert "search.repeats (2)" in repeated["search.early_stopping"]


def test_the_progress_table_shows_the_sampled_settings_and_objectives_under_short_headers():
    from search.tuner import progress_columns

    config = load_config(CONFIGS / "cats_dogs.yaml")
    settings, metrics = progress_columns(config)
    assert settings["activation_checkpointing"] == "recompute" and settings["batch_size"] == "batch"
    assert list(settings) == list(config.space)
    assert list(metrics) == ["epoch", *config.objectives, "status"]
    assert list(metrics.values()) == ["epoch", "img/s", "best_acc", "gap", "outcome"]
    longest = max(len(header) for header in [*settings.values(), *metrics.values()])
    assert longest <= 10  # a header no wider than its values: the table fits a wide terminal
