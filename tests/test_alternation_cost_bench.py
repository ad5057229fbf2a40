"""`bench/alternation_cost.py`: the alternations a knee's ablations time, planned as the
search plans them and timed as the ablation trials time them."""

import importlib.util
import json
import sys

import pytest
import torch

import trainables.classifier as classifier
import trainables.timing as timing
from tests.conftest import CONFIGS, REPO
from trainables.settings import SAME_WORK_PER_IMAGE
from trainables.speed import MIN_ROUNDS

spec = importlib.util.spec_from_file_location(
    "alternation_cost", REPO / "bench" / "alternation_cost.py"
)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench
spec.loader.exec_module(bench)


def test_the_default_knees_timed_ablations_are_those_that_change_a_steps_work():
    trials = bench.knee_settings(str(CONFIGS / "cats_dogs.yaml"), {}, ["amp"])
    changed = [next(iter(trial["speed_baseline"])) for trial in trials]
    assert changed == ["batch_size", "optimizer", "activation_checkpointing",
                       "accumulation_steps", "adabatch_growth", "channels_last"]  # fmt: skip
    assert not set(changed) & SAME_WORK_PER_IMAGE
    for trial in trials:  # each timed against the knee's own value, the rest the knee's
        ((key, base),) = trial["speed_baseline"].items()
        assert base == {**bench.KNEE, "accumulation_steps": 1,
                        "activation_checkpointing": False}[key]  # fmt: skip
        assert trial[key] != base
        assert trial["lr"] == bench.KNEE["lr"] and trial["epochs"] == 8
    with_amp = bench.knee_settings(str(CONFIGS / "cats_dogs.yaml"), {"batch_size": 64}, [])
    assert {"amp": False} in [trial["speed_baseline"] for trial in with_amp]
    assert {"batch_size": 64} in [trial["speed_baseline"] for trial in with_amp]


def test_a_knee_of_the_smoke_search_is_trained_and_timed_against_each_change(capsys, monkeypatch):
    monkeypatch.setattr(classifier, "speed_against_baseline", classifier.speed_against_baseline)
    monkeypatch.setattr(timing, "time_in_alternation", timing.time_in_alternation)
    knee = {"batch_size": 16, "optimizer": "sgd", "lr": 0.01}
    threads = torch.get_num_threads()
    try:
        bench.worker(str(CONFIGS / "smoke.yaml"), knee, [])  # one thread, as a trial's
    finally:
        torch.set_num_threads(threads)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["ablation"] for row in rows] == ['{"batch_size": 16}', '{"optimizer": "sgd"}']
    for row in rows:
        assert row["seconds"] > 0 and row["ratio"] > 0 and row["half_width"] >= 0
        assert row["rounds_of_blocks"] >= MIN_ROUNDS
        assert 0 < row["rounds_s"] < row["seconds"]  # the rest: its fresh models' start


def test_knee_settings_after_tree_are_refused_naming_the_order(capsys):
    with pytest.raises(SystemExit) as refused:
        bench.main(["--tree", str(REPO), "batch_size=64"])
    assert refused.value.code == 2
    assert "--tree batch_size=64: not a checkout" in capsys.readouterr().err
