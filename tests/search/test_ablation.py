"""The ablation plan: what each setting is changed to, in what order, within how many trials."""

import json

import pytest

from analysis.flat import as_written
from search.ablation import (
    Change,
    ablated_settings,
    ablation_points,
    ablation_trials,
    alternatives,
    describe,
    plan_changes,
)
from search.config import AblationSection, load_config
from search.experiment import SearchState
from search.space import SpaceParam
from tests.conftest import CONFIGS

SPACE = {
    "batch_size": SpaceParam.parse({"choice": [16, 32, 64, 128, 256]}),
    "optimizer": SpaceParam.parse({"grid": ["sgd", "adam", "lamb"]}),
    "lr": SpaceParam.parse({"loguniform": [3.0e-4, 3.0e-2]}),
    "amp": SpaceParam.parse({"choice": [False, True]}),
    "accumulation_steps": SpaceParam.parse({"choice": [1, 2, 4]}),
    "cudnn_benchmark": SpaceParam.parse({"choice": [False, True]}),
}
KNEE = {"batch_size": 64, "optimizer": "adam", "lr": 0.02, "amp": False,
        "accumulation_steps": 1, "cudnn_benchmark": False, "epochs": 3, "seed": 7,
        "repeat_of": "", "predicted_peak_mb": 12.0}  # fmt: skip


def test_a_switch_is_switched_and_a_category_goes_to_each_other_value():
    assert alternatives(SPACE["amp"], False) == [True]
    assert alternatives(SPACE["optimizer"], "adam") == ["sgd", "lamb"]


def test_a_number_of_a_list_goes_to_its_neighbours_below_then_above():
    assert alternatives(SPACE["batch_size"], 64) == [32, 128]  # half and double the batch
    assert alternatives(SPACE["batch_size"], 256) == [128]  # the end of the list
    assert alternatives(SPACE["accumulation_steps"], 1) == [2]


def test_a_range_goes_to_half_and_double_inside_the_range():
    assert alternatives(SPACE["lr"], 0.01) == pytest.approx([0.005, 0.02])
    assert alternatives(SPACE["lr"], 0.02) == pytest.approx([0.01, 0.03])  # clipped at the top
    assert alternatives(SpaceParam.parse({"randint": [1, 4]}), 1) == [2]
    assert alternatives(SpaceParam.parse({"uniform": [0.0, 1.0]}), 0.5) == [0.25, 0.75]


def test_the_plan_runs_one_change_of_every_setting_then_the_next_values_the_seeds_spread_over_it():
    changes = plan_changes(KNEE, SPACE, seeds=2, on_gpu=False)
    labels = [change.label for change in changes]
    assert labels == [
        "noise floor", "batch_size=32", "optimizer=sgd", "lr=0.01", "amp=true",
        "noise floor", "accumulation_steps=2", "batch_size=128", "optimizer=lamb", "lr=0.03",
    ]  # fmt: skip
    floor = [change.value for change in changes if change.label == "noise floor"]
    assert floor == [1007, 1008]  # other seeds than the knee's


def test_a_trial_count_keeps_the_seeds_and_the_first_changes():
    labels = [c.label for c in plan_changes(KNEE, SPACE, seeds=2, on_gpu=False, max_trials=4)]
    assert labels == ["noise floor", "batch_size=32", "noise floor", "optimizer=sgd"]
    assert plan_changes(KNEE, SPACE, seeds=2, on_gpu=False, max_trials=2) == []  # no room


def test_fewer_changes_than_seeds_keep_every_seed():
    """Room for one change beside two seeds planned one seed: both seeds fell before the
    change and one took the other's place (2026-12-07)."""
    labels = [c.label for c in plan_changes(KNEE, SPACE, seeds=2, on_gpu=False, max_trials=3)]
    assert labels == ["noise floor", "noise floor", "batch_size=32"]
    three = plan_changes(KNEE, SPACE, seeds=3, on_gpu=False, max_trials=4)
    assert [c.value for c in three if c.label == "noise floor"] == [1007, 1008, 1009]
    assert len(three) == 4


def test_the_cudnn_autotuner_is_ablated_on_gpus_only():
    assert "cudnn_benchmark" not in ablated_settings(SPACE, on_gpu=False)
    on_gpu = [c.label for c in plan_changes(KNEE, SPACE, seeds=1, on_gpu=True)]
    assert "cudnn_benchmark=true" in on_gpu


def test_the_default_trial_count_is_the_seeds_and_one_change_of_every_setting():
    assert ablation_trials(AblationSection(), SPACE, on_gpu=False) == 2 + 5
    assert ablation_trials(AblationSection(), SPACE, on_gpu=True) == 2 + 6
    assert ablation_trials(AblationSection(max_trials=4), SPACE, on_gpu=False) == 4


def test_points_are_the_base_config_with_one_change_and_notes_of_what_they_ablate():
    points = ablation_points([("abc", KNEE)], SPACE, AblationSection(seeds=1), on_gpu=False)
    assert len(points) == 1 + 5
    floor, batch = points[0], points[1]  # one seed: the first run
    assert floor["seed"] == 1007 and floor["ablation"] == "noise floor"
    assert batch["batch_size"] == 32 and batch["seed"] == 7 and batch["epochs"] == 3
    assert all(point["ablation_of"] == "abc" for point in points)
    assert "predicted_peak_mb" not in batch and "repeat_of" not in batch  # search notes
    assert describe(points).startswith("6 ablation trials around trial abc: noise floor, ")


def test_a_change_of_a_steps_work_is_timed_against_the_bases_value_and_the_rest_are_not():
    points = ablation_points([("abc", KNEE)], SPACE, AblationSection(seeds=1), on_gpu=False)
    timed = {point["ablation"]: point.get("speed_baseline_json") for point in points}
    assert json.loads(timed["batch_size=32"]) == {"batch_size": 64}
    assert json.loads(timed["optimizer=sgd"]) == {"optimizer": "adam"}
    assert json.loads(timed["amp=true"]) == {"amp": False}
    assert timed["lr=0.01"] is None  # the same work per image: no speed effect to time
    assert timed["noise floor"] is None


def test_every_point_sets_every_key_so_the_untimed_ones_stay_untimed():
    from search.ablation_run import with_every_key

    points = with_every_key(
        ablation_points([("abc", KNEE)], SPACE, AblationSection(seeds=3), on_gpu=False)
    )
    assert len({frozenset(point) for point in points}) == 1  # the same keys in each
    assert [p["speed_baseline_json"] for p in points if p["ablation"] == "noise floor"] == [
        None
    ] * 3  # before: a point without a baseline drew another point's


def test_a_screened_plan_runs_every_floor_seed_before_the_changes():
    labels = [c.label for c in plan_changes(KNEE, SPACE, seeds=2, on_gpu=False, max_trials=4,
                                            floor_first=True)]  # fmt: skip
    assert labels == ["noise floor", "noise floor", "batch_size=32", "optimizer=sgd"]


def test_a_base_without_a_seed_is_ablated_at_the_trainables_default_seed():
    base = {key: value for key, value in KNEE.items() if key != "seed"}
    points = ablation_points([("abc", base)], SPACE, AblationSection(seeds=1), on_gpu=False)
    assert points[0]["seed"] == 1000 and points[1]["seed"] == 0


def test_around_the_front_the_trials_run_out_on_later_trials_first():
    other = {**KNEE, "batch_size": 16}
    plan = AblationSection(around="front", max_trials=12, seeds=1)
    points = ablation_points([("knee", KNEE), ("other", other)], SPACE, plan, on_gpu=False)
    bases = [point["ablation_of"] for point in points]
    assert bases == ["knee"] * 9 + ["other"] * 3  # the knee's whole plan (1 + 5 + 3), then
    assert [p["ablation"] for p in points[9:]] == ["noise floor", "batch_size=32", "optimizer=sgd"]
    tight = AblationSection(around="front", max_trials=10, seeds=1)
    points = ablation_points([("knee", KNEE), ("other", other)], SPACE, tight, on_gpu=False)
    assert len(points) == 9  # one trial left: no room for a seed and a change of the other


def test_values_are_written_as_in_a_config():
    assert as_written(True) == "true" and as_written(0.000918323) == "0.0009183"
    assert Change("optimizer", "adam").label == "optimizer=adam"


def test_a_trial_count_that_the_seeds_use_up_is_refused_naming_the_key(tmp_path):
    with pytest.raises(Exception) as raised:
        load_config(CONFIGS / "cats_dogs.yaml", ["search.ablation={max_trials: 2, seeds: 2}"])
    message = raised.value.render()
    assert "search.ablation.max_trials" in message and "more than search.ablation.seeds" in message


def test_the_main_search_ablates_by_default_and_the_smoke_search_does_not():
    assert load_config(CONFIGS / "cats_dogs.yaml", []).search.ablation == AblationSection()
    assert load_config(CONFIGS / "smoke.yaml", []).search.ablation is None


def test_a_resumed_search_may_change_its_ablations_and_nothing_else():
    started = load_config(CONFIGS / "smoke.yaml", []).as_yaml_dict()
    state = SearchState("run", "uri", "smoke", started)
    with_ablations = load_config(CONFIGS / "smoke.yaml", ["search.ablation={seeds: 1}"])
    assert state.differences(with_ablations.as_yaml_dict()) == []
    other = load_config(CONFIGS / "smoke.yaml", ["search.num_samples=6"])
    assert [key for key, *_ in state.differences(other.as_yaml_dict())] == ["search.num_samples"]


def test_a_setting_left_unset_is_written_null_as_a_config_writes_it():
    assert as_written(None) == "null" and as_written(float("nan")) == "null"
