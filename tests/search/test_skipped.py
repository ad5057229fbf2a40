"""Suggestions never started are read back from the Optuna study, whole."""

import optuna

from search.feasibility import MemoryModel
from search.searcher import build_searcher, optuna_searcher
from search.skipped import skipped_suggestions
from search.space import SpaceParam

OBJECTIVES = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}
FIXED = {"epochs": 2, "model": "small_cnn", "optimizer": "sgd", "memory_budget_mb": 40,
         "data": {"image_size": 16}}  # fmt: skip


def test_each_suggestion_skipped_for_memory_comes_back_with_its_config_and_why(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    searcher = build_searcher(
        {"batch_size": SpaceParam("choice", (16, 64))},
        OBJECTIVES,
        optuna.samplers.RandomSampler(seed=0),
        fixed_config=FIXED,
        storage=storage,
        study_name="s",
        memory=MemoryModel(probe=lambda settings: lambda batch: 10 + 0.5 * batch),
    )
    for index in range(4):
        searcher.suggest(f"t{index}")
    skipped = skipped_suggestions(storage, "s", FIXED)
    assert skipped, "batch 64 (42 MiB) was never asked for"
    trials = optuna_searcher(searcher).study.trials
    numbers = [t.number for t in trials if t.params["batch_size"] == 64]
    assert [s.trial_id for s in skipped] == [f"skipped-{n}" for n in numbers]
    for suggestion in skipped:
        assert suggestion.config == {**FIXED, "batch_size": 64, "predicted_peak_mb": 42.0}
        assert suggestion.status == "oom_predicted"
        assert suggestion.allowed_mb == 40 and "over the 40 MiB" in suggestion.detail
        assert suggestion.metrics["status"] == "oom_predicted"


def test_a_search_without_a_study_skipped_nothing(tmp_path):
    assert skipped_suggestions(f"sqlite:///{tmp_path / 'none.db'}", "s", FIXED) == []
