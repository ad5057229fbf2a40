"""`bench/search_paths.py`: where runs of one search part, and how much a told speed's noise
moves the sampler's next suggestion, read off Optuna studies written here."""

import datetime
import importlib.util
import sys

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.study import StudyDirection
from optuna.trial import TrialState

from search.optuna_search import build_sampler
from search.tuner import OPTUNA_STORAGE
from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("search_paths", REPO / "bench" / "search_paths.py")
paths = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = paths
spec.loader.exec_module(paths)

DIRECTIONS = [StudyDirection.MAXIMIZE, StudyDirection.MAXIMIZE]  # speed, accuracy
SPACE = {"x": FloatDistribution(0.0, 1.0)}
START = datetime.datetime(2026, 11, 28, 12, 0, 0)


def trial(number: int, x: float, speed: float, accuracy: float, ended: int | None = None):
    """A trial asked at second `number` that ended at second `ended` (default: at once)."""
    made = optuna.trial.create_trial(
        state=TrialState.COMPLETE, values=[speed, accuracy], params={"x": x},
        distributions=SPACE,
    )  # fmt: skip
    made.number = number
    made.datetime_start = START + datetime.timedelta(seconds=number)
    end = number + 0.5 if ended is None else ended
    made.datetime_complete = START + datetime.timedelta(seconds=end)
    return made


def pruned(told):
    """`told` as a trial stopped early: PRUNED, no values."""
    made = optuna.trial.create_trial(state=TrialState.PRUNED, params=told.params,
                                     distributions=SPACE)  # fmt: skip
    made.number, made.datetime_start = told.number, told.datetime_start
    made.datetime_complete = told.datetime_complete
    return made


def study(xs, speeds=None, ended=None):
    speeds = speeds or [1000.0] * len(xs)
    ended = ended or {}
    return [
        trial(i, x, speed, 0.8, ended.get(i))
        for i, (x, speed) in enumerate(zip(xs, speeds, strict=True))
    ]


def test_runs_part_at_the_first_trial_whose_config_differs():
    first = study([0.1, 0.2, 0.3, 0.4])
    assert paths.first_parting([first, study([0.1, 0.2, 0.3, 0.4])]) is None
    assert paths.first_parting([first, study([0.1, 0.2, 0.35, 0.4])]) == 2


def test_runs_knew_the_same_trials_only_where_the_same_had_ended_alike_before_the_ask():
    quick = study([0.1, 0.2, 0.3])
    slow = study([0.1, 0.2, 0.3], ended={1: 5})  # trial 1 ended after trial 2 was asked
    assert paths.knew_the_same([quick, study([0.1, 0.2, 0.3])], 2)
    assert not paths.knew_the_same([quick, slow], 2)
    assert [t.number for t in paths.known_before(slow, slow[2])] == [0]
    stopped = study([0.1, 0.2, 0.3])
    stopped[1] = pruned(stopped[1])  # stopped early in one run, run whole in the other
    assert not paths.knew_the_same([quick, stopped], 2)


def test_a_trial_asked_before_and_not_yet_told_is_seen_running():
    trials = study([0.1, 0.2, 0.3, 0.4], ended={1: 5})
    assert [t.number for t in paths.running_at(trials, trials[3])] == [1]
    seen = paths.as_seen(trials[1], 0, 2.0, running=True)
    assert seen.state == TrialState.RUNNING and seen.values is None
    assert seen.params == trials[1].params


def test_a_told_trial_is_seen_with_its_speed_alone_scaled():
    told = trial(0, 0.3, 1000.0, 0.8)
    told.set_constraint("min_accuracy", 0.1)
    seen = paths.as_seen(told, 0, 1.5)
    assert seen.values == [1500.0, 0.8]
    assert (seen.state, seen.params, seen.constraints) == (
        TrialState.COMPLETE, {"x": 0.3}, {"min_accuracy": 0.1},
    )  # fmt: skip
    assert paths.as_seen(pruned(told), 0, 1.5).values is None


def test_what_runs_had_told_differs_only_in_the_speeds_and_by_how_much():
    first = study([0.1, 0.2, 0.3], speeds=[1000.0, 2000.0, 3000.0])
    second = study([0.1, 0.2, 0.3], speeds=[1010.0, 2100.0, 1.0])  # trial 2 asked after 0, 1
    same, widest, whose = paths.told_apart([first, second], 2, column=0)
    assert same and whose == 1 and widest == pytest.approx(0.05)
    second[0] = trial(0, 0.1, 1010.0, 0.9)  # another accuracy told
    assert not paths.told_apart([first, second], 2, column=0)[0]


def test_a_study_is_read_from_the_results_folder(tmp_path):
    storage = f"sqlite:///{tmp_path / OPTUNA_STORAGE}"
    written = optuna.create_study(directions=DIRECTIONS, storage=storage, study_name="run")
    written.add_trials(study([0.5, 0.25, 0.75]))
    read = paths.study_of(tmp_path)
    assert read.directions == DIRECTIONS
    assert [t.params["x"] for t in paths.asked_in_order(read)] == [0.5, 0.25, 0.75]


def test_a_folder_without_a_study_is_named_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match=f"{tmp_path / OPTUNA_STORAGE}: no such file"):
        paths.study_of(tmp_path)


def sway(trials, sigma):
    make = lambda: build_sampler("tpe", 24, 0)  # noqa: E731 (start-up: 8 trials)
    return paths.speed_sway(trials, DIRECTIONS, make, 8, 0, sigma, 10, np.random.default_rng(0))


def test_speeds_as_measured_ask_the_same_and_speeds_a_hair_apart_move_the_suggestion():
    """Ten trials equally accurate, two of them the fastest a thousandth apart: which is the
    sampler's best, and where it samples next, is the jitter's."""
    xs = [0.05, 0.95, 0.5, 0.3, 0.7, 0.15, 0.85, 0.4, 0.6, 0.25, 0.75]
    speeds = [500.0, 1000.0, 600.0, 550.0, 650.0, 520.0, 999.0, 580.0, 620.0, 540.0, 640.0]
    trials = study(xs, speeds)
    assert sway(trials, 0.0) == (0, 30)  # asks 8, 9, 10: ten times each
    moved, asked = sway(trials, 0.02)
    assert asked == 30 and moved >= 5


def test_a_point_enqueued_whole_was_not_the_samplers_choice():
    enqueued = optuna.trial.create_trial(
        state=TrialState.COMPLETE, values=[1.0, 0.8], params={"x": 0.3}, distributions=SPACE,
        system_attrs={"fixed_params": {"x": 0.3}},
    )  # fmt: skip
    assert not paths.sampled(enqueued)
    assert paths.sampled(trial(0, 0.3, 1.0, 0.8))


def test_a_runs_slot_use_is_its_trials_seconds_over_their_span_and_its_processes(tmp_path):
    """Two trials in one process one after the other, a third beside them in another: 9
    trial-seconds from second 100 to 106."""
    import json

    reports = {"a": [(101.0, 1.0, 7), (102.0, 2.0, 7)], "b": [(104.0, 2.0, 7), (106.0, 4.0, 7)],
               "c": [(103.0, 3.0, 8)]}  # (timestamp, time_total_s, pid)  # fmt: skip
    for name, rows in reports.items():
        folder = tmp_path / f"trial_{name}"
        folder.mkdir()
        lines = [{"timestamp": stamp, "time_total_s": total, "pid": pid,
                  "time_this_iter_s": total - (rows[i - 1][1] if i else 0.0)}
                 for i, (stamp, total, pid) in enumerate(rows)]  # fmt: skip
        (folder / "result.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert paths.slot_use(tmp_path) == (9.0, 6.0, 2)
