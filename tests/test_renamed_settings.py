"""Settings renamed so that a word means one thing ("checkpoint" is Tune's saved trial
state; recomputing activations is `activation_checkpointing`; a "budget" is MiB, the
ablations' trial count `max_trials`): the old names still work everywhere a user or an old
search has them, saying what they are now."""

import pytest

from analysis.load import trial_row
from search.config import load_config, renamed_notes
from search.experiment import SearchState
from tests.conftest import CONFIGS
from trainables.settings import TrainSettings


def test_a_trainable_config_with_an_old_name_trains_with_the_new_one_and_is_told():
    with pytest.warns(FutureWarning) as told:
        settings = TrainSettings.from_config({"grad_checkpointing": True, "checkpoint_segments": 3})
    assert settings.activation_checkpointing and settings.recomputed_segments == 3
    assert sorted(str(warning.message) for warning in told) == [
        "the setting checkpoint_segments is now recomputed_segments; the old name still works "
        "for now",
        "the setting grad_checkpointing is now activation_checkpointing; the old name still "
        "works for now",
    ]


def test_a_search_config_with_old_names_loads_under_the_new_ones_with_a_note(tmp_path):
    config = load_config(CONFIGS / "smoke.yaml", [
        "train.grad_checkpointing=true", "space.checkpoint_segments={choice: [2, 3]}",
    ])  # fmt: skip
    assert config.train["activation_checkpointing"] is True
    assert "recomputed_segments" in config.space and "checkpoint_segments" not in config.space
    assert renamed_notes(config) == [
        f"note: {CONFIGS / 'smoke.yaml'}: train.grad_checkpointing is now "
        "train.activation_checkpointing; the old name still works for now",
        f"note: {CONFIGS / 'smoke.yaml'}: space.checkpoint_segments is now "
        "space.recomputed_segments; the old name still works for now",
    ]
    assert "renamed" not in config.as_yaml_dict()


def test_a_search_started_with_an_old_name_resumes_with_the_new_one():
    started = SearchState("run", "sqlite:///x.db", "e", {"train": {"grad_checkpointing": True}})
    assert started.differences({"train": {"activation_checkpointing": True}}) == []
    assert started.differences({"train": {"activation_checkpointing": False}}) == [
        ("train.activation_checkpointing", True, False)
    ]


def test_the_trials_of_a_search_run_before_the_rename_load_under_the_new_names():
    row = trial_row("t", {"grad_checkpointing": True, "batch_size": 64}, {"status": "ok"})
    assert row["config.activation_checkpointing"] is True
    assert "config.grad_checkpointing" not in row


def test_the_ablations_budget_is_now_max_trials_and_the_old_key_still_works_with_a_note():
    config = load_config(CONFIGS / "cats_dogs.yaml", ["search.ablation={budget: 5, seeds: 2}"])
    assert config.search.ablation.max_trials == 5
    assert renamed_notes(config) == [
        f"note: {CONFIGS / 'cats_dogs.yaml'}: search.ablation.budget is now "
        "search.ablation.max_trials; the old name still works for now"
    ]
    started = SearchState("run", "sqlite:///x.db", "e", {"search": {"ablation": {"budget": 5}}})
    assert started.differences({"search": {"ablation": {"max_trials": 5}}}) == []


def test_the_noise_scales_split_steps_were_probes_and_the_old_name_still_works():
    """A "probe" is a batch tried for its memory; the steps split in two for the gradient
    noise scale were also called probes."""
    with pytest.warns(FutureWarning, match="noise_probe_steps is now noise_split_steps"):
        settings = TrainSettings.from_config({"noise_probe_steps": 2})
    assert settings.noise_split_steps == 2 and settings.noise_splits == 2
    config = load_config(CONFIGS / "smoke.yaml", ["train.noise_probe_steps=3"])
    assert config.train["noise_split_steps"] == 3
    row = trial_row("t", {"noise_probe_steps": 1}, {"status": "ok"})  # Tune's folder or MLflow
    assert row["config.noise_split_steps"] == 1 and "config.noise_probe_steps" not in row
    started = SearchState("run", "sqlite:///x.db", "e", {"train": {"noise_probe_steps": 2}})
    assert started.differences({"train": {"noise_split_steps": 2}}) == []
