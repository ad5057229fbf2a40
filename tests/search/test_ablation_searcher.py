"""The ablations' order when a base's noise floor runs first (`search.ablation.ScreenedOrder`)
and the searcher that hands it to Tune (`search.ablation_searcher.ScreenedAblations`): a
front trial whose config learns on some seeds only is passed over for the next, and the
trials keep their processes while a floor decides."""

import os
import time
from types import SimpleNamespace

import pytest
import ray
from ray import tune
from ray.tune.search import Searcher

from search.ablation import ScreenedOrder, describe_order
from search.ablation_run import trials_expected
from search.ablation_searcher import ScreenedAblations
from search.held_ends import HoldsEnds

MIN_ACCURACY = 0.55


def candidate(base: str, changes: int = 2, seeds: int = 2) -> tuple[dict, ...]:
    """A base's configs, its floor first, as `base_points(..., floor_first=True)` plans them."""
    floor = [{"ablation_of": base, "ablation": "noise floor", "seed": 1000 + i}
             for i in range(seeds)]  # fmt: skip
    changed = [{"ablation_of": base, "ablation": f"lr={i}", "seed": 0} for i in range(changes)]
    return tuple(floor + changed)


def labels(points: list[dict]) -> list[str]:
    return [f"{point['ablation_of']}:{point['ablation']}" for point in points]


def order(*bases: str, around: str = "knee", screened: bool = True) -> ScreenedOrder:
    return ScreenedOrder(tuple(candidate(b) for b in bases), around, screened, MIN_ACCURACY)


def ok(accuracy: float) -> dict:
    """A trial's last result where it ended ok."""
    return {"status": "ok", "best_val_acc": accuracy}


def started(searcher: ScreenedAblations, *trial_ids: str) -> None:
    for trial_id in trial_ids:
        assert searcher.suggest(trial_id) is not None


def test_the_knees_changes_wait_for_its_floor_and_follow_it_where_it_learns_on_every_seed():
    screened = order("knee", "next")
    assert screened.decided({}) == (list(candidate("knee")[:2]), False)
    assert screened.decided({("knee", 1000): 0.8})[1] is False  # one floor run still runs
    decided, final = screened.decided({("knee", 1000): 0.8, ("knee", 1001): 0.78})
    assert labels(decided) == ["knee:noise floor", "knee:noise floor", "knee:lr=0", "knee:lr=1"]
    assert final  # the next trial is never tried


def test_a_knee_that_learned_nothing_on_one_seed_gives_way_to_the_next_front_trial():
    floors = {("knee", 1000): 0.5225, ("knee", 1001): 0.7625}
    decided, final = order("knee", "next").decided(floors)
    assert labels(decided)[2:] == ["next:noise floor", "next:noise floor"] and not final
    decided, final = order("knee", "next").decided(
        {**floors, ("next", 1000): 0.86, ("next", 1001): 0.80}
    )
    assert labels(decided)[4:] == ["next:lr=0", "next:lr=1"] and final


def test_where_no_candidate_learns_on_every_seed_the_knee_is_ablated_after_all_floors():
    floors = {("knee", 1000): 0.5, ("knee", 1001): 0.8, ("next", 1000): 0.8, ("next", 1001): 0.5}
    decided, final = order("knee", "next").decided(floors)
    assert labels(decided)[4:] == ["knee:lr=0", "knee:lr=1"] and final


def test_a_floor_run_that_ended_without_an_accuracy_is_no_sign_of_a_failing_seed():
    decided, final = order("knee", "next").decided({("knee", 1000): None, ("knee", 1001): 0.8})
    assert labels(decided)[2:] == ["knee:lr=0", "knee:lr=1"] and final


def test_around_the_front_each_trial_that_learns_on_every_seed_is_ablated_the_others_not():
    floors = {("a", 1000): 0.8, ("a", 1001): 0.5, ("b", 1000): 0.8, ("b", 1001): 0.8}
    decided, final = order("a", "b", around="front").decided(floors)
    assert labels(decided) == [
        "a:noise floor", "a:noise floor", "b:noise floor", "b:noise floor", "b:lr=0", "b:lr=1"
    ]  # fmt: skip
    assert final


def test_unscreened_every_config_runs_as_planned_at_once():
    assert order("knee", screened=False).decided({}) == (list(candidate("knee")), True)


def test_the_plan_line_names_the_trials_that_may_take_the_knees_place():
    line = describe_order(order("knee", "next", "third"))
    assert line.startswith("4 ablation trials around trial knee: noise floor, lr=0, lr=1")
    assert "the next front trial's in turn, next, third," in line


def test_the_searcher_waits_while_a_floor_runs_and_finishes_with_the_order():
    searcher = ScreenedAblations(order("knee", "next"), max_concurrent=2)
    first, second = searcher.suggest("t0"), searcher.suggest("t1")
    assert (first["seed"], first["asked"], second["seed"], second["asked"]) == (1000, 0, 1001, 1)
    assert searcher.suggest("t2") is None  # two at once
    searcher.on_trial_complete("t0", ok(0.5))
    assert searcher.suggest("t2") is None and searcher.waits()  # t1 decides what is next
    searcher.on_trial_complete("t1", ok(0.8))
    assert searcher.suggest("t2")["ablation_of"] == "next"  # the knee learns on some seeds only
    searcher.on_trial_complete("t2", error=True)  # a crash: no sign of a failing seed
    assert searcher.suggest("t3")["ablation_of"] == "next"
    searcher.on_trial_complete("t3", ok(0.8))
    assert [searcher.suggest(t)["ablation"] for t in ("t4", "t5")] == ["lr=0", "lr=1"]
    searcher.on_trial_complete("t4", ok(0.8))
    searcher.on_trial_complete("t5", ok(0.8))
    assert searcher.suggest("t6") == Searcher.FINISHED


def test_a_held_floor_run_decides_at_once_but_keeps_its_slot_until_tune_ends_it():
    told: list[str] = []
    searcher = ScreenedAblations(order("knee", "next"), max_concurrent=2, say=told.append)
    started(searcher, "t0", "t1")
    assert searcher.waits(ending="t0")  # were t0 to end now, the next trial would wait for t1
    searcher.end_held("t0", ok(0.8), stopped=False)
    assert not searcher.waits(ending="t1")  # t1's end decides
    searcher.on_trial_complete("t1", ok(0.5))
    assert told == ["Ablations: trial knee's noise floor learned nothing on some seeds "
                    "(0.8 / 0.5): its config learns on some seeds only; trying trial next's "
                    "floor"]  # fmt: skip
    assert searcher.suggest("t2")["ablation_of"] == "next"
    assert searcher.suggest("t3") is None  # t0, held, still has its process
    searcher.on_trial_complete("t0", ok(0.8))  # Tune ends it: dropped
    assert searcher.floors[("knee", 1000)] == 0.8
    assert searcher.suggest("t3")["ablation_of"] == "next"


def test_a_pruned_floor_run_is_no_sign_of_a_failing_seed_as_the_reports_floor_leaves_it_out():
    searcher = ScreenedAblations(order("knee", "next"), max_concurrent=2)
    started(searcher, "t0", "t1")
    searcher.on_trial_complete("t0", {"status": "oom", "best_val_acc": 0.5})
    searcher.on_trial_complete("t1", ok(0.8))
    assert searcher.suggest("t2")["ablation"] == "lr=0"  # the knee is ablated


def test_a_floor_runs_second_end_after_a_restore_changes_nothing_already_decided():
    searcher = ScreenedAblations(order("knee", "next"), max_concurrent=2)
    started(searcher, "t0", "t1")
    searcher.on_trial_complete("t0", error=True)  # raised: no sign
    searcher.on_trial_complete("t1", ok(0.8))
    assert searcher.suggest("t2")["ablation"] == "lr=0"
    searcher.on_trial_complete("t0", ok(0.5))  # Tune reran the errored trial after a resume
    assert searcher.suggest("t3")["ablation"] == "lr=1"  # still the knee's plan


def test_without_a_cap_on_trials_at_once_no_end_is_held():
    assert ScreenedAblations(order("knee"), max_concurrent=2).holds_ends
    assert not ScreenedAblations(order("knee"), max_concurrent=None).holds_ends
    assert not ScreenedAblations(order("knee", screened=False), max_concurrent=2).holds_ends


def test_a_saved_searcher_resumes_where_its_floors_left_it(tmp_path):
    searcher = ScreenedAblations(order("knee", "next"), max_concurrent=2)
    searcher.suggest("t0"), searcher.suggest("t1")
    searcher.on_trial_complete("t0", ok(0.5))
    searcher.save(str(tmp_path / "state.pkl"))
    restored = ScreenedAblations(order("knee", "next"), max_concurrent=2)
    restored.restore(str(tmp_path / "state.pkl"))
    restored.on_trial_complete("t1", ok(0.8))  # Tune reruns t1 after a resume
    assert restored.suggest("t2")["ablation_of"] == "next"


def result(point: dict, accuracy: float | None, epochs: int = 8) -> SimpleNamespace:
    metrics = {"epoch": epochs, "status": "ok", "done": True, "best_val_acc": accuracy}
    return SimpleNamespace(config=point, metrics=metrics, error=None)


def test_a_fit_interrupted_while_a_floor_ran_reads_as_interrupted():
    screened = order("knee", "next")
    knee = candidate("knee")
    assert trials_expected(screened, [result(knee[0], 0.8)]) == 3  # more to decide
    ended = [result(knee[0], 0.8), result(knee[1], 0.8), result(knee[2], 0.8)]
    assert trials_expected(screened, ended) == 4  # the knee and its two changes


def floor_trial(config: dict) -> None:
    """A floor run of base "a" at seed 1001 learns nothing; each trial reports its process."""
    time.sleep(0.1 if config["seed"] == 1000 else 1.0)  # the first floor run ends first
    failed = config["ablation_of"] == "a" and config["seed"] == 1001
    tune.report({"epoch": 1, "status": "ok", "best_val_acc": 0.5 if failed else 0.8,
                 "pid": os.getpid()})  # fmt: skip


@pytest.mark.ray
def test_in_tune_the_next_trials_floor_and_changes_run_in_the_floors_processes(
    ray_instance, tmp_path
):
    screened = ScreenedOrder(
        tuple(tuple({**p, "epochs": 1} for p in candidate(b, changes=1)) for b in "ab"),
        "knee", True, MIN_ACCURACY,
    )  # fmt: skip
    searcher = ScreenedAblations(screened, max_concurrent=2)
    scheduler = HoldsEnds()
    scheduler.keep_processes(searcher)
    tuner = tune.Tuner(
        floor_trial,
        tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler,
                                    num_samples=screened.most_trials, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    )  # fmt: skip
    grid = tuner.fit()
    ran = sorted((r.metrics["timestamp"], labels([r.config])[0], r.metrics["pid"]) for r in grid)
    assert sorted(label for _, label, _ in ran) == sorted(
        ["a:noise floor", "a:noise floor", "b:noise floor", "b:noise floor", "b:lr=0"]
    )  # a learned nothing on seed 1001: b's floor, then b's change, a's never
    assert len({pid for _, _, pid in ran}) == 2  # the held floor run kept its process
    assert trials_expected(screened, grid) == 5


@pytest.mark.ray
def test_ends_are_held_only_where_the_cluster_runs_every_trial_allowed_at_once(ray_instance):
    """A review, 2026-12-08: two floor runs allowed at once on resources for one, the first
    held at its end would keep the CPUs the second waits for, and the second is the one the
    next trial waits for: nothing would move again."""
    from search.ablation_run import slots
    from search.config import load_config
    from tests.conftest import CONFIGS

    config = load_config(CONFIGS / "smoke.yaml", []).with_cards(0)
    cpus = int(sum(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]))
    assert slots(config) == cpus  # a CPU a trial
    wide = load_config(CONFIGS / "smoke.yaml", [f"resources.cpu={cpus}"]).with_cards(0)
    assert slots(wide) == 1
