"""`search.searcher.InOrder`: trial k suggested knowing exactly the trials `lag` or more places
before it, whatever order the trials end in; and the rungs judging it by the same places."""

import heapq
import math
import random

import optuna
import pytest
from ray.tune.search import Searcher

from search.config import SearchSection
from search.early_stopping import ParetoEarlyStopping
from search.searcher import InOrder, build_searcher, optuna_searcher
from search.space import SpaceParam
from trainables.metrics import ASKED

OBJECTIVES = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}
SPACE = {
    "batch_size": SpaceParam("choice", (16, 32, 64, 128)),
    "lr": SpaceParam("loguniform", low=1e-4, high=1e-1),
}
FIXED = {"epochs": 2, "model": "small_cnn", "data": {"image_size": 16}}


class Recording(Searcher):
    """The layer below: suggests {"n": 0}, {"n": 1}, ... and records what reaches it."""

    def __init__(self) -> None:
        super().__init__(metric="best_val_acc", mode="max")
        self.calls: list[tuple[str, str]] = []  # (what, trial id)
        self.count = 0

    def suggest(self, trial_id: str) -> dict:
        self.count += 1
        return {"n": self.count - 1}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.calls.append(("result", trial_id))

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        self.calls.append(("complete", trial_id))


def test_a_trial_waits_for_the_trials_lag_places_before_it_and_carries_its_place():
    below = Recording()
    in_order = InOrder(below, lag=3, trials=10)
    assert [in_order.suggest(t)[ASKED] for t in "abc"] == [0, 1, 2]  # 0..-1, 0..0 known
    assert in_order.suggest("d") is None  # trial 0 (a) still runs: d waits
    in_order.on_trial_result("b", {"epoch": 1})
    in_order.on_trial_complete("b", {"epoch": 1})
    assert in_order.suggest("d") is None  # b ended first, but d waits for a
    assert below.calls == []  # and b is held: nothing told out of order
    in_order.on_trial_complete("a", {})
    assert in_order.suggest("d") == {"n": 3, ASKED: 3}
    assert below.calls == [("complete", "a")]  # told a, not yet b
    assert in_order.suggest("e") == {"n": 4, ASKED: 4}  # b ended: told, result first
    assert below.calls == [("complete", "a"), ("result", "b"), ("complete", "b")]


def test_once_every_trial_was_suggested_and_ended_the_held_ones_are_told_in_order():
    below = Recording()
    in_order = InOrder(below, lag=3, trials=3)
    for trial_id in "abc":
        in_order.suggest(trial_id)
    for trial_id in "cba":
        in_order.on_trial_complete(trial_id, {})
    assert below.calls == [("complete", "a"), ("complete", "b"), ("complete", "c")]


def test_without_a_lag_everything_passes_at_once_as_it_arrives_and_no_place_is_noted():
    below = Recording()
    in_order = InOrder(below, lag=None, trials=3)
    for trial_id in "abc":
        assert ASKED not in in_order.suggest(trial_id)  # the config as without the layer
    in_order.on_trial_complete("c", {})
    in_order.on_trial_result("a", {})
    assert below.calls == [("complete", "c"), ("result", "a")]


def test_a_searcher_saved_while_results_wait_goes_on_from_them_after_a_restore(tmp_path):
    first = build_searcher(SPACE, OBJECTIVES, optuna.samplers.RandomSampler(seed=0),
                           fixed_config=FIXED, storage=f"sqlite:///{tmp_path / 'o.db'}",
                           study_name="s", lag=2, trials=4)  # fmt: skip
    for trial_id in "ab":
        first.suggest(trial_id)
    first.on_trial_complete("b", values(0.8))  # held: a still runs
    first.save(str(tmp_path / "searcher.pkl"))
    second = build_searcher(SPACE, OBJECTIVES, optuna.samplers.RandomSampler(seed=0),
                            fixed_config=FIXED, storage=f"sqlite:///{tmp_path / 'o.db'}",
                            study_name="s", lag=2, trials=4)  # fmt: skip
    second.restore(str(tmp_path / "searcher.pkl"))
    assert second.suggest("c") is None  # still waits for a
    second.on_trial_complete("a", values(0.7))
    assert second.suggest("c")[ASKED] == 2
    complete, running = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING
    states = [t.state for t in study_of(second).trials]
    assert states == [complete, running, running]  # a told; b held, 1 place before c
    second.on_trial_complete("c", values(0.6))
    assert second.suggest("d")[ASKED] == 3  # b, 2 places before d, now told
    assert [t.state for t in study_of(second).trials][:3] == [complete, complete, running]


def study_of(searcher) -> optuna.Study:
    return optuna_searcher(searcher).study


def values(accuracy: float) -> dict:
    return {"throughput": 1000.0, "best_val_acc": accuracy, "gen_gap": 0.1, "status": "ok"}


def objectives_of(params: dict) -> dict:
    """What a trial of `params` reports: the same numbers whenever it runs, as a CPU trial's
    accuracies are (its speed aside)."""
    accuracy = 0.9 - abs(math.log10(params["lr"]) + 2.5) / 10 - params["batch_size"] / 2000
    return values(accuracy) | {"throughput": 100.0 * params["batch_size"] ** 0.5}


def path_of(lag: int | None, timing_seed: int, trials: int = 20, slots: int = 2) -> list:
    """The configs a TPE search suggests, in order, with `slots` trials at a time whose
    lengths are drawn from `timing_seed`: a stand-in for Tune's loop, asking whenever a
    slot is free (and again once a trial ends, where the searcher said to wait)."""
    searcher = build_searcher(SPACE, OBJECTIVES, build_sampler_tpe(), fixed_config=FIXED,
                              lag=lag, trials=trials)  # fmt: skip
    timing = random.Random(timing_seed)
    running: list[tuple[float, str, dict]] = []  # (ends at, trial id, params)
    now, suggested = 0.0, []
    while len(suggested) < trials or running:
        while len(running) < slots and len(suggested) < trials:
            trial_id = f"t{len(suggested)}"
            params = searcher.suggest(trial_id)
            if params is None:
                break
            suggested.append((params["batch_size"], round(params["lr"], 10)))
            heapq.heappush(running, (now + timing.uniform(1, 8), trial_id, params))
        now, trial_id, params = heapq.heappop(running)
        searcher.on_trial_complete(trial_id, objectives_of(params))
    return suggested


def build_sampler_tpe() -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(n_startup_trials=4, seed=0, multivariate=True)


def test_with_a_lag_the_order_trials_end_in_does_not_change_what_is_suggested():
    """Trials of random lengths, two at a time, drawn three ways: the same 20 configs in the
    same order with a lag of 3; without one, the order they ended in moved TPE's asks (from
    the 15th here)."""
    with_lag = [path_of(3, seed) for seed in (1, 2, 3)]
    assert with_lag[0] == with_lag[1] == with_lag[2]
    without = [path_of(None, seed) for seed in (1, 2, 3)]
    assert len({tuple(path) for path in without}) == 3
    parting = min(i for i in range(20) if len({path[i] for path in without}) > 1)
    assert parting == 14  # the 15th suggestion, once TPE's better trials turned on the order
    assert all(path[:4] == with_lag[0][:4] for path in without)  # the random start-up alike


def test_at_a_rung_a_trial_is_judged_only_against_the_trials_lag_or_more_places_before_it():
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[1], keep=0.5, min_peers=2, lag=2)
    good = {"epoch": 1, "throughput": 1000.0, "best_val_acc": 0.9, "gen_gap": 0.05}
    bad = {"epoch": 1, "throughput": 500.0, "best_val_acc": 0.6, "gen_gap": 0.2}
    assert not scheduler.verdict("p0", good, last_epoch=4, asked=0)
    assert not scheduler.verdict("p1", good, last_epoch=4, asked=1)
    # place 2 knows place 0 only: one peer, which dominates it
    assert scheduler.verdict("p2", bad, last_epoch=4, asked=2)
    assert "1 of the 1 trials suggested 2 or more places before it" in scheduler.stopped["p2"]
    # place 1's peer p1 reached the rung before a trial at place 2 would know it: not a peer
    assert set(scheduler.peers_at(1, "p2")) == {"p0"}
    assert set(scheduler.peers_at(1, "p1")) == set()  # nothing 2 places before place 1
    # without places (a search before them), every trial that reached the rung is a peer
    unplaced = ParetoEarlyStopping(OBJECTIVES, rungs=[1], keep=0.5, min_peers=2, lag=2)
    unplaced.verdict("p0", good, last_epoch=4)
    unplaced.verdict("p1", good, last_epoch=4)
    assert set(unplaced.peers_at(1, "p2")) == {"p0", "p1"}


def test_by_default_the_lag_is_one_more_than_the_trials_at_once_where_trials_queue():
    assert SearchSection(num_samples=24, max_concurrent_trials=2).effective_lag == 3
    assert SearchSection(num_samples=24, max_concurrent_trials=2, lag=5).effective_lag == 5
    assert SearchSection(num_samples=24, max_concurrent_trials=2, lag=None).effective_lag is None
    # one at a time the order is exact already; all at once, nobody waits for anybody; and
    # without a cap the trials at once are what the resources allow, unknown here
    assert SearchSection(num_samples=24, max_concurrent_trials=1).effective_lag is None
    assert SearchSection(num_samples=2, max_concurrent_trials=2).effective_lag is None
    assert SearchSection(num_samples=24).effective_lag is None
    with pytest.raises(ValueError, match="must be auto, null or a whole number > 0, got 0"):
        SearchSection(lag=0)


def test_the_searchers_stack_has_the_order_on_top_so_it_holds_what_every_layer_hears():
    searcher = build_searcher(SPACE, OBJECTIVES, build_sampler_tpe(), fixed_config=FIXED)
    assert isinstance(searcher, InOrder)
