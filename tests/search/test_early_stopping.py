"""Multi-objective early stopping: the rung rule alone, the scheduler over fake trials, and
the status every reader of a stopped trial sees."""

import math
from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from ray.tune.schedulers import TrialScheduler

from search.config import EarlyStoppingSection
from search.early_stopping import (
    EarlyStoppedStatus,
    ParetoEarlyStopping,
    RungRecord,
    replay,
    rung_verdict,
)

OBJECTIVES = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}


def standing(*values: float, above_min_accuracy: bool = True) -> RungRecord:
    return RungRecord(tuple(values), above_min_accuracy)


def test_a_trial_no_peer_dominates_goes_on_however_many_trials_are_ahead():
    peers = {"fast": standing(-900.0, -0.6, 0.0), "accurate": standing(-100.0, -0.9, 0.0)}
    assert rung_verdict(standing(-500.0, -0.7, 0.0), peers, keep=0.5, min_peers=2) is None


def test_a_dominated_trial_outside_the_kept_share_is_stopped_naming_who_dominated_it():
    peers = {
        "a": standing(-900.0, -0.8, 0.0),
        "b": standing(-800.0, -0.9, 0.0),
        "c": standing(-50.0, -0.95, 0.0),
    }
    verdict = rung_verdict(standing(-100.0, -0.5, 0.1), peers, keep=0.5, min_peers=3)
    assert verdict == ["a", "b"]


def test_too_few_trials_at_the_rung_stop_nothing():
    peers = {"a": standing(-900.0, -0.8, 0.0)}
    assert rung_verdict(standing(-100.0, -0.5, 0.1), peers, keep=0.5, min_peers=3) is None


def test_a_dominated_trial_within_the_kept_share_goes_on():
    # d is dominated by a only; b and c are dominated by a too: everyone but a ties with d.
    peers = {
        "a": standing(-900.0, -0.9, 0.0),
        "b": standing(-800.0, -0.5, 0.0),
        "c": standing(-700.0, -0.6, 0.0),
    }
    assert rung_verdict(standing(-600.0, -0.7, 0.0), peers, keep=0.5, min_peers=3) is None
    assert rung_verdict(standing(-600.0, -0.7, 0.0), peers, keep=0.25, min_peers=3) == ["a"]


def test_a_trial_below_the_min_accuracy_trails_every_peer_above_it_whatever_its_gap():
    # at chance with a gap of 0 and the fastest: no peer dominates it on the objectives,
    # but the report would keep it off the front, and three peers are above the line
    peers = {
        "a": standing(-900.0, -0.80, 0.10),
        "b": standing(-800.0, -0.70, 0.05),
        "c": standing(-700.0, -0.60, 0.02),
    }
    at_chance = standing(-2000.0, -0.50, 0.0, above_min_accuracy=False)
    assert rung_verdict(at_chance, peers, keep=0.5, min_peers=3) == ["a", "b", "c"]
    assert rung_verdict(standing(-2000.0, -0.50, 0.0), peers, keep=0.5, min_peers=3) is None


def test_below_the_min_accuracy_trials_are_not_ranked_by_how_far_below_they_are():
    # at an early rung accuracies near chance differ by noise: the slower of two trials
    # below the line trails, not the one that is 0.04 less accurate
    below = {"nearly": standing(-100.0, -0.54, 0.0, above_min_accuracy=False)}
    faster = standing(-900.0, -0.50, 0.0, above_min_accuracy=False)
    assert rung_verdict(faster, below, keep=0.5, min_peers=2) is None
    slower = standing(-50.0, -0.54, 0.0, above_min_accuracy=False)
    assert rung_verdict(slower, below, keep=0.5, min_peers=2) == ["nearly"]


def test_a_trial_below_the_min_accuracy_never_stops_one_above_it():
    below = {"x": standing(-900.0, -0.50, 0.0, above_min_accuracy=False)}
    assert rung_verdict(standing(-100.0, -0.60, 0.1), below, keep=0.5, min_peers=2) is None


def test_below_the_line_a_trial_goes_on_while_most_of_its_peers_are_below_it_too():
    # epoch 1: three of four trials are still near chance; one peer above the line is not
    # a majority, so a trial below goes on unless its own kind outruns it
    peers = {
        "above": standing(-100.0, -0.60, 0.1),
        "b": standing(-500.0, -0.50, 0.0, above_min_accuracy=False),
        "c": standing(-400.0, -0.51, 0.0, above_min_accuracy=False),
    }
    fast = standing(-600.0, -0.50, 0.0, above_min_accuracy=False)
    assert rung_verdict(fast, peers, keep=0.5, min_peers=3) is None


def fake_trial(trial_id: str, epochs: int = 8) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id, config={"epochs": epochs})


def result(epoch: int, throughput: float, accuracy: float, status: str = "ok") -> dict:
    return {"epoch": epoch, "throughput": throughput, "best_val_acc": accuracy, "gen_gap": 0.0,
            "status": status}  # fmt: skip


def test_the_scheduler_stops_at_rungs_only_and_says_why():
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2, 4], keep=0.5, min_peers=3)
    for name, speed in (("a", 900), ("b", 800)):
        decision = scheduler.on_trial_result(None, fake_trial(name), result(2, speed, 0.8))
        assert decision == TrialScheduler.CONTINUE
    slow = fake_trial("slow")
    assert scheduler.on_trial_result(None, slow, result(1, 50, 0.5)) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, slow, result(2, 50, 0.5)) == TrialScheduler.STOP
    assert scheduler.stopped["slow"].startswith("stopped at epoch 2 (rung 1 of 2)")
    assert "by 2 of the 2 trials" in scheduler.stopped["slow"]
    assert "(a, b)" in scheduler.stopped["slow"]


def test_the_scheduler_stops_a_trial_at_chance_with_no_gap_and_says_it_is_below_the_line():
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[1], min_peers=3, min_accuracy=0.55)
    for name, speed, accuracy in (("a", 900, 0.8), ("b", 800, 0.7)):
        scheduler.on_trial_result(None, fake_trial(name), {**result(1, speed, accuracy),
                                                           "gen_gap": 0.1})  # fmt: skip
    decision = scheduler.on_trial_result(None, fake_trial("chance"), result(1, 2000, 0.5))
    assert decision == TrialScheduler.STOP
    assert scheduler.stopped["chance"] == (
        "stopped at epoch 1 (rung 1 of 1): best_val_acc 0.500 below the min accuracy 0.550 "
        "(so behind every trial above it), dominated by 2 of the 2 trials that reached it "
        "before (a, b)"
    )
    # without a min accuracy nothing dominates it: it is the fastest and has no gap
    blind = ParetoEarlyStopping(OBJECTIVES, rungs=[1], min_peers=3)
    for name, speed, accuracy in (("a", 900, 0.8), ("b", 800, 0.7)):
        blind.on_trial_result(None, fake_trial(name), {**result(1, speed, accuracy),
                                                       "gen_gap": 0.1})  # fmt: skip
    decision = blind.on_trial_result(None, fake_trial("chance"), result(1, 2000, 0.5))
    assert decision == TrialScheduler.CONTINUE


def test_a_trial_missing_an_objective_at_a_rung_goes_on_and_is_nobodys_peer():
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2)
    scheduler.on_trial_result(None, fake_trial("a"), result(2, 900, 0.9))
    unscored = {**result(2, 10, 0.1), "gen_gap": float("nan")}
    assert scheduler.on_trial_result(None, fake_trial("b"), unscored) == TrialScheduler.CONTINUE
    assert set(scheduler.seen[2]) == {"a"}


def test_a_trial_reporting_a_rung_again_is_not_its_own_peer_and_replaces_its_record():
    """Restarted from a checkpoint older than the rung (a retried failure, the memory
    monitor's resume), a trial reports the rung a second time, a little slower."""
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], keep=0.5, min_peers=2)
    again = fake_trial("a")
    assert scheduler.on_trial_result(None, again, result(2, 1000, 0.8)) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, again, result(2, 950, 0.8)) == TrialScheduler.CONTINUE
    assert scheduler.seen[2] == {"a": standing(-950.0, -0.8, 0.0)} and not scheduler.stopped
    # a peer it trails still stops it, counted once
    scheduler.on_trial_result(None, fake_trial("b"), result(2, 2000, 0.9))
    assert scheduler.on_trial_result(None, again, result(2, 950, 0.8)) == TrialScheduler.STOP
    assert "by 1 of the 1 trials that reached it before (b)" in scheduler.stopped["a"]


@pytest.mark.parametrize("status", ["oom", "diverged"])
def test_a_pruned_result_is_left_to_its_own_status(status):
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2)
    scheduler.on_trial_result(None, fake_trial("a"), result(2, 900, 0.9))
    decision = scheduler.on_trial_result(None, fake_trial("b"), result(2, 10, 0.1, status))
    assert decision == TrialScheduler.CONTINUE and not scheduler.stopped


def test_a_trial_at_its_last_epoch_is_never_stopped():
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2)
    scheduler.on_trial_result(None, fake_trial("a"), result(2, 900, 0.9))
    decision = scheduler.on_trial_result(None, fake_trial("b", epochs=2), result(2, 10, 0.1))
    assert decision == TrialScheduler.CONTINUE


def test_the_status_callback_marks_only_the_last_result_of_a_stopped_trial():
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2)
    scheduler.stopped["b"] = "stopped at epoch 2"
    marker = EarlyStoppedStatus(scheduler)
    going_on, last, other = result(1, 10, 0.1), {**result(2, 10, 0.1), "done": True}, {
        **result(2, 900, 0.9), "done": True}  # fmt: skip
    marker.on_trial_result(0, [], fake_trial("b"), going_on)
    marker.on_trial_result(0, [], fake_trial("b"), last)
    marker.on_trial_result(0, [], fake_trial("a"), other)
    assert going_on["status"] == "ok" and other["status"] == "ok"
    assert last["status"] == "stopped_early" and last["status_detail"] == "stopped at epoch 2"


def test_the_rungs_records_travel_with_the_callbacks_state_to_a_resumed_search():
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2)
    for name, speed in (("a", 900), ("b", 10)):
        scheduler.on_trial_result(None, fake_trial(name), result(2, speed, 0.9))
    state = EarlyStoppedStatus(scheduler).get_state()
    resumed = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2)
    EarlyStoppedStatus(resumed).set_state(state)
    assert resumed.seen == scheduler.seen and set(resumed.stopped) == {"b"}
    decision = resumed.on_trial_result(None, fake_trial("c"), result(2, 5, 0.1))
    assert decision == TrialScheduler.STOP  # compared with a and b from before the resume


def test_a_scheduler_pickled_before_the_min_accuracy_unpickles_to_the_rule_it_began_with():
    import pickle

    # Tuner.restore unpickles the scheduler the search started with
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2)
    del scheduler.__dict__["min_accuracy"]  # as one saved before it existed
    restored = pickle.loads(pickle.dumps(scheduler))
    restored.on_trial_result(None, fake_trial("a"), result(2, 900, 0.9))
    at_chance = {**result(2, 2000, 0.5), "gen_gap": 0.0}
    assert restored.on_trial_result(None, fake_trial("b"), at_chance) == TrialScheduler.CONTINUE


def test_a_scheduler_pickled_before_places_were_kept_saves_and_resumes_without_them():
    import pickle

    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2)
    for attribute in ("asked", "lag"):
        del scheduler.__dict__[attribute]  # as one saved before they existed
    restored = pickle.loads(pickle.dumps(scheduler))
    restored.on_trial_result(None, fake_trial("a"), result(2, 900, 0.9))
    state = pickle.loads(pickle.dumps(EarlyStoppedStatus(restored).get_state()))
    assert state["asked"] == {} and list(state["seen"][2]) == ["a"]
    resumed = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2)
    EarlyStoppedStatus(resumed).set_state({"seen": state["seen"], "stopped": {}})
    assert resumed.asked == {}  # a state saved before places: none known


def test_a_nan_accuracy_is_below_the_line_as_the_report_counts_it():
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_accuracy=0.55)
    assert not scheduler.above_min_accuracy({"best_val_acc": float("nan")})
    assert not scheduler.above_min_accuracy({"best_val_acc": 0.5})
    assert scheduler.above_min_accuracy({"best_val_acc": 0.55})
    assert scheduler.above_min_accuracy({})  # nothing to judge


def test_a_replay_with_a_min_accuracy_needs_the_accuracies():
    epochs = history(("a", 2, 101, 2.0, 900, 0.8)).drop(columns="best_val_acc")
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_accuracy=0.55)
    with pytest.raises(ValueError, match="must hold `best_val_acc`"):
        replay(scheduler, epochs, {"a": 3})


def test_a_search_saved_before_the_min_accuracy_resumes_with_its_rungs_records():
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], min_peers=2, min_accuracy=0.55)
    saved = {"seen": {2: {"a": (-900.0, -0.9, 0.0)}}, "stopped": {}}  # plain tuples then
    EarlyStoppedStatus(scheduler).set_state(saved)
    assert scheduler.seen == {2: {"a": RungRecord((-900.0, -0.9, 0.0), True)}}
    decision = scheduler.on_trial_result(None, fake_trial("c"), result(2, 5, 0.1))
    assert decision == TrialScheduler.STOP


def history(*rows: tuple[str, int, int, float, float, float]):
    """Epochs of a finished search: (trial, epoch, timestamp, time_total_s, throughput,
    accuracy)."""
    import pandas as pd

    columns = ["trial_id", "epoch", "timestamp", "time_total_s", "throughput", "best_val_acc"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.assign(gen_gap=0.0)


def two_fast_trials_and_a_slow_one():
    """Three epochs each of two fast trials that learn and a slow one that does not."""
    return history(
        ("a", 1, 100, 1.0, 900, 0.6), ("a", 2, 101, 2.0, 900, 0.8), ("a", 3, 102, 3.0, 900, 0.9),
        ("b", 1, 100, 1.5, 800, 0.6), ("b", 2, 101, 2.5, 800, 0.9), ("b", 3, 102, 3.5, 800, 0.9),
        ("slow", 1, 103, 0.5, 50, 0.5), ("slow", 2, 104, 1.0, 50, 0.5),
        ("slow", 3, 105, 1.5, 50, 0.6),
    )  # fmt: skip


def test_a_replay_stops_the_trials_the_scheduler_would_have_stopped_where_it_would_have():
    epochs = two_fast_trials_and_a_slow_one()
    last = {"a": 3, "b": 3, "slow": 3}
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], keep=0.5, min_peers=3)
    assert replay(scheduler, epochs, last) == {"slow": 2}
    assert scheduler.stopped["slow"].startswith("stopped at epoch 2 (rung 1 of 1)")


def test_a_replay_counts_a_warming_up_trials_rungs_from_the_end_of_its_warmup_as_live():
    epochs = two_fast_trials_and_a_slow_one()
    last = {"a": 4, "b": 4, "slow": 4}
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], keep=0.5, min_peers=3)
    # one epoch of warmup: its second epoch at full rate is epoch 3, against a's and b's 2
    assert replay(scheduler, epochs, last, {"slow": 1}) == {"slow": 3}
    assert list(scheduler.seen[2]) == ["a", "b", "slow"]
    detail = scheduler.stopped["slow"]
    assert "stopped at epoch 3 (rung 1 of 1, its epoch 2 at full rate after 1 of warmup)" in detail


def test_a_replay_takes_the_results_in_the_order_they_were_reported_not_as_listed():
    # the slow trial reached the rung first (an earlier second), when it had no peers
    epochs = history(
        ("a", 2, 101, 2.0, 900, 0.8), ("b", 2, 101, 2.5, 800, 0.9),
        ("slow", 2, 99, 1.0, 50, 0.5),
    )  # fmt: skip
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], keep=0.5, min_peers=3)
    assert replay(scheduler, epochs, {"a": 3, "b": 3, "slow": 3}) == {}
    assert list(scheduler.seen[2]) == ["slow", "a", "b"]


def test_a_replay_with_a_lag_judges_each_trial_by_the_places_its_search_noted():
    """The slow trial was suggested third (place 2): with a lag of 2 its only peer is the
    trial at place 0, b, and a at place 1 does not count however early it reported; b alone
    is too few peers for min_peers 3, so it goes on, where unplaced it is stopped."""
    epochs = two_fast_trials_and_a_slow_one()
    last = {"a": 3, "b": 3, "slow": 3}
    lagged = ParetoEarlyStopping(OBJECTIVES, rungs=[2], keep=0.5, min_peers=3, lag=2)
    assert replay(lagged, epochs, last, asked={"b": 0, "a": 1, "slow": 2}) == {}
    assert set(lagged.peers_at(2, "slow")) == {"b"}
    unlagged = ParetoEarlyStopping(OBJECTIVES, rungs=[2], keep=0.5, min_peers=3)
    assert replay(unlagged, epochs, last, asked={"b": 0, "a": 1, "slow": 2}) == {"slow": 2}


def test_within_one_second_a_replay_orders_results_by_when_their_trials_started():
    # "slow" started at 0.0 s and reached the rung at 10.1 s; "fast" started at 3.0 s and
    # reached it at 10.8 s: both in second 10, "slow" first, with no peer to stop it. Its
    # first epoch (1.1 s: second 1) and fast's (1.3 s: second 4) pin their starts.
    epochs = history(
        ("slow", 1, 1, 1.1, 50, 0.5), ("slow", 2, 10, 10.1, 50, 0.5),
        ("fast", 1, 4, 1.3, 900, 0.9), ("fast", 2, 10, 7.8, 900, 0.9),
    )  # fmt: skip
    scheduler = ParetoEarlyStopping(OBJECTIVES, rungs=[2], keep=0.5, min_peers=2)
    assert replay(scheduler, epochs, {"slow": 3, "fast": 3}) == {}
    assert list(scheduler.seen[2]) == ["slow", "fast"]


def test_arrival_times_stay_within_each_results_own_second():
    from search.early_stopping import arrival_times

    # restored after a failure: its clock paused for 30 s, so no one start fits both
    epochs = history(("t", 1, 100, 1.5, 1, 0.5), ("t", 2, 132, 2.5, 1, 0.5))
    arrivals = arrival_times(epochs).tolist()
    assert 100 <= arrivals[0] < 101 and 132 <= arrivals[1] < 133


@pytest.fixture(scope="module")
def stopped_search(tmp_path_factory):
    """Two trials in turn that differ only in gradient checkpointing: they learn exactly
    alike (checkpointing recomputes the same numbers), so the one objective, memory, and
    the min accuracy are all that part them: the second needs more memory per step, so at
    the rung after epoch 1 it is stopped."""
    import os

    from search.run import main
    from tests.conftest import CONFIGS, UNSCALED

    workdir = tmp_path_factory.mktemp("early")
    saved = dict(os.environ)  # main sets Ray's variables for its process
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        code = main(
            [
                "--config", str(CONFIGS / "smoke.yaml"), "--name", "early", "--num-samples", "2",
                "search.max_concurrent_trials=1", "search.objectives={peak_mem_mb: min}",
                "search.early_stopping={rungs: [1], min_peers: 2}",
                "space.activation_checkpointing={grid: [true, false]}", "space.batch_size=null",
                "train.batch_size=64", "space.optimizer=null", "space.lr=null", UNSCALED,
            ]
        )  # fmt: skip
    os.environ.clear()
    os.environ.update(saved)
    assert code == 0
    return workdir


@pytest.mark.ray
@pytest.mark.slow
def test_a_stopped_trial_says_so_in_the_table_mlflow_and_optuna_and_is_off_the_front(
    stopped_search,
):
    import optuna
    import pandas as pd
    from mlflow.tracking import MlflowClient

    trials = pd.read_csv(stopped_search / "ray_results" / "early" / "report" / "trials.csv")
    by_checkpointing = trials.set_index("config.activation_checkpointing")
    kept = by_checkpointing.loc[True]
    assert kept["status"] == "ok" and kept["epoch"] == 3
    stopped = by_checkpointing.loc[False]
    assert stopped["status"] == "stopped_early" and stopped["epoch"] == 1
    assert stopped["status_detail"].startswith("stopped at epoch 1 (rung 1 of 1)")
    assert not stopped["is_pareto"] and pd.isna(stopped["pareto_rank"])

    client = MlflowClient(f"sqlite:///{stopped_search / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("smoke")
    runs = client.search_runs([experiment.experiment_id], "tags.status = 'stopped_early'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].info.run_name.startswith("[stopped_early] bs64")
    assert "recompute" not in runs[0].info.run_name

    storage = f"sqlite:///{stopped_search / 'ray_results' / 'early' / 'optuna.db'}"
    study = optuna.load_study(study_name="early", storage=storage)
    states = {t.params["activation_checkpointing"]: t.state for t in study.trials}
    pruned, complete = optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.COMPLETE
    assert states == {True: complete, False: pruned}


@pytest.mark.ray
@pytest.mark.slow
def test_replaying_a_search_with_its_own_settings_stops_the_trial_it_stopped(stopped_search):
    import pandas as pd

    from analysis.load import histories_from_tune
    from trainables.metrics import min_accuracy_for

    experiment = stopped_search / "ray_results" / "early"
    names = ("peak_mem_mb", "timestamp", "time_total_s")
    scheduler = ParetoEarlyStopping(
        {"peak_mem_mb": "min"}, rungs=[1], min_peers=2, min_accuracy=min_accuracy_for(2)
    )
    names = (*names, "best_val_acc")  # the min accuracy is judged on it
    histories = histories_from_tune(experiment, names)
    stops = replay(scheduler, histories, dict.fromkeys(histories["trial_id"], 3))
    trials = pd.read_csv(experiment / "report" / "trials.csv", dtype={"trial_id": str})
    stopped = trials.loc[trials["status"] == "stopped_early", "trial_id"].tolist()
    assert stops == dict.fromkeys(stopped, 1) and len(stopped) == 1


# --- stopping on evidence ----------------------------------------------------------------

SPLITS = {"val": 400, "train_eval": 400, "test": 400}  # the main search's


def evidence_scheduler(**changes) -> ParetoEarlyStopping:
    options = {"rungs": [1], "min_peers": 3, "min_accuracy": 0.55, "split_sizes": SPLITS}
    return ParetoEarlyStopping(OBJECTIVES, **{**options, **changes})


def timed(epoch: int, speed: float, accuracy: float, width: float = 0.05) -> dict:
    """A result whose throughput was timed to +-`width` of itself."""
    return {**result(epoch, speed, accuracy), "throughput_low": speed * (1 - width),
            "throughput_high": speed * (1 + width)}  # fmt: skip


def in_turn(scheduler: ParetoEarlyStopping, *trials: tuple[str, float, float], width=0.01):
    """Each (trial, speed, accuracy) reports its first epoch, its speed timed to +-`width`,
    in turn: the scheduler's decision on the last."""
    for trial, speed, accuracy in trials:
        decision = scheduler.on_trial_result(
            None, fake_trial(trial), timed(1, speed, accuracy, width)
        )
    return decision


def test_a_trial_below_the_min_accuracy_is_said_to_trail_on_accuracy_not_on_a_tight_speed():
    """Stopped for learning nothing: its speed, known to +-1%, trails by more standard
    errors than its accuracy does, but the accuracy is what put it behind."""
    scheduler = evidence_scheduler()
    decision = in_turn(scheduler, ("a", 1300, 0.80), ("b", 1250, 0.75), ("chance", 900, 0.51))
    assert decision == TrialScheduler.STOP
    detail = scheduler.stopped["chance"]
    assert "below the min accuracy" in detail
    assert "it trails a most on best_val_acc: 0.51 against 0.8" in detail


def test_below_the_min_accuracy_among_peers_as_inaccurate_it_trails_on_what_it_trails_on():
    """Dominated by peers below the line too, no more accurate than it: then the speed is
    what it trails on, and the detail says so."""
    scheduler = evidence_scheduler()
    scheduler.on_trial_result(None, fake_trial("a"), timed(1, 1300, 0.52, width=0.01))
    scheduler.on_trial_result(None, fake_trial("b"), timed(1, 1250, 0.52, width=0.01))
    decision = scheduler.on_trial_result(None, fake_trial("slow"), timed(1, 900, 0.53, 0.01))
    assert decision == TrialScheduler.STOP
    assert "it trails a most on throughput: 900 against 1300" in scheduler.stopped["slow"]


def test_a_trial_behind_by_less_than_its_split_can_tell_goes_on():
    """The README's config lost in a run: 0.51 against 0.5375 on 400 validation images
    (1.1 standard errors of the difference), and a speed that moved 1.3x between runs."""
    scheduler = evidence_scheduler()
    scheduler.on_trial_result(None, fake_trial("a"), result(1, 1300, 0.5375))
    scheduler.on_trial_result(None, fake_trial("b"), result(1, 1250, 0.54))
    decision = scheduler.on_trial_result(None, fake_trial("readme"), result(1, 1000, 0.51))
    assert decision == TrialScheduler.CONTINUE and "readme" not in scheduler.stopped
    # judged on the values alone, as before, it was stopped
    blind = evidence_scheduler(split_sizes=None)
    blind.on_trial_result(None, fake_trial("a"), result(1, 1300, 0.5375))
    blind.on_trial_result(None, fake_trial("b"), result(1, 1250, 0.54))
    assert blind.on_trial_result(None, fake_trial("readme"), result(1, 1000, 0.51)) == "STOP"


def test_a_trial_clearly_behind_is_stopped_saying_by_how_much_and_how_surely():
    scheduler = evidence_scheduler()
    scheduler.on_trial_result(None, fake_trial("a"), timed(1, 1300, 0.80))
    scheduler.on_trial_result(None, fake_trial("b"), timed(1, 1250, 0.75))
    decision = scheduler.on_trial_result(None, fake_trial("behind"), timed(1, 1280, 0.51))
    assert decision == TrialScheduler.STOP
    detail = scheduler.stopped["behind"]
    assert "it trails a most on best_val_acc: 0.51 against 0.8" in detail
    assert "standard errors apart" in detail
    sigmas = float(detail.rsplit(", ", 1)[1].split()[0])
    assert sigmas == pytest.approx(0.29 / (0.8 * 0.2 / 400 + 0.51 * 0.49 / 400) ** 0.5, rel=0.01)


def test_a_faster_trial_is_not_stopped_for_speed_its_intervals_cannot_tell_apart():
    scheduler = evidence_scheduler(min_accuracy=None)
    scheduler.on_trial_result(None, fake_trial("a"), timed(1, 1300, 0.70, width=0.1))
    scheduler.on_trial_result(None, fake_trial("b"), timed(1, 1290, 0.70, width=0.1))
    close = scheduler.on_trial_result(None, fake_trial("close"), timed(1, 1200, 0.70, width=0.1))
    assert close == TrialScheduler.CONTINUE  # 8% slower, inside 10% intervals
    slow = scheduler.on_trial_result(None, fake_trial("slow"), timed(1, 600, 0.70, width=0.05))
    assert slow == TrialScheduler.STOP


def lopsided(epoch: int, speed: float, accuracy: float, low: float, high: float) -> dict:
    return {**result(epoch, speed, accuracy), "throughput_low": low, "throughput_high": high}


def test_a_peer_slower_than_the_trials_near_side_does_not_stop_it_whatever_its_far_side():
    """A live search's case: SGD at batch 32 at its fourth epoch, 3437 images/s timed in
    [2981, 8130] (one segment far out above), more accurate peers at about 2169 [1783, 2511]
    (1.6x slower). With one error from the whole width the far side hid that: "no better
    beyond the noise on throughput", stopped. Slower beyond the noise is a matter of the
    trial's lower side and the peer's upper one."""
    scheduler = evidence_scheduler(min_accuracy=None, ahead_on=["best_val_acc"])
    scheduler.on_trial_result(None, fake_trial("adam"), lopsided(1, 2169, 0.8425, 1783, 2511))
    scheduler.on_trial_result(None, fake_trial("peer"), lopsided(1, 2100, 0.84, 1750, 2450))
    trial = lopsided(1, 3437, 0.7725, 2981, 8130)
    assert scheduler.on_trial_result(None, fake_trial("sgd"), trial) == TrialScheduler.CONTINUE
    # its upper side long, its lower side as long: then the peers may be as fast, and stop it
    slow_side = lopsided(1, 3437, 0.7725, 1500, 8130)
    again = evidence_scheduler(min_accuracy=None, ahead_on=["best_val_acc"])
    again.on_trial_result(None, fake_trial("adam"), lopsided(1, 2169, 0.8425, 1783, 2511))
    again.on_trial_result(None, fake_trial("peer"), lopsided(1, 2100, 0.84, 1750, 2450))
    assert again.on_trial_result(None, fake_trial("sgd"), slow_side) == TrialScheduler.STOP


def test_a_rung_record_carries_its_speeds_sides_turned_over_as_lower_is_better():
    scheduler = evidence_scheduler(min_accuracy=None)
    record = scheduler.record_of(lopsided(1, 3437, 0.7725, 2981, 8130))
    (throughput_below, throughput_above), accuracy_sides, _ = record.sides
    # -throughput: 8130 lies below it (better), 2981 above (worse)
    assert throughput_below == pytest.approx((8130 - 3437) / 1.959964)
    assert throughput_above == pytest.approx((3437 - 2981) / 1.959964)
    assert accuracy_sides[0] == accuracy_sides[1] == pytest.approx(record.errors[1])
    assert evidence_scheduler(split_sizes=None).record_of(result(1, 900, 0.8)).sides == ()


def test_a_peer_saved_before_the_sides_were_kept_is_judged_on_its_error_both_ways():
    """A resumed search's peers were saved with one error per objective: both sides."""
    old = RungRecord((-2169.0, -0.8425, 0.0), True, (186.0, 0.018, 0.035))
    new = evidence_scheduler(min_accuracy=None).record_of(lopsided(1, 3437, 0.7725, 2981, 8130))
    peer = RungRecord((-2100.0, -0.84, 0.0), True, (180.0, 0.018, 0.035))
    assert rung_verdict(new, {"old": old, "peer": peer}, keep=0.5, min_peers=3,
                        accuracy_column=1, decisive=[1]) is None  # fmt: skip


def test_ahead_on_accuracy_a_slower_trial_as_accurate_so_far_goes_on():
    """The replayed searches' case: half as fast, as accurate at the rung (its accuracy is
    a forecast, its speed is not): stopped when any objective decides, not when accuracy
    does."""
    for ahead_on, expected in ((None, "STOP"), (["best_val_acc"], "CONTINUE")):
        scheduler = evidence_scheduler(min_accuracy=None, ahead_on=ahead_on)
        trials = ("a", 1300, 0.70), ("b", 1290, 0.71), ("slow", 600, 0.69)
        assert in_turn(scheduler, *trials, width=0.02) == expected


def test_ahead_on_accuracy_a_trial_clearly_less_accurate_and_no_faster_is_stopped_for_it():
    scheduler = evidence_scheduler(ahead_on=["best_val_acc"])
    behind = in_turn(scheduler, ("a", 1300, 0.80), ("b", 1250, 0.78), ("behind", 700, 0.62))
    assert behind == TrialScheduler.STOP
    detail = scheduler.stopped["behind"]
    # a peer that is slower dominates too where the speeds cannot be told apart: said so
    assert detail.startswith(
        "stopped at epoch 1 (rung 1 of 1): dominated (no better beyond the noise on "
        "throughput, best_val_acc, gen_gap, and behind on best_val_acc) by 2 of the 2 trials"
    )
    # its speed trails by more standard errors; the accuracy decided, and is named
    assert "it trails a most on best_val_acc: 0.62 against 0.8" in detail
    # as far behind but faster than both: behind on nothing else is not met
    assert in_turn(scheduler, ("fast", 2600, 0.62)) == TrialScheduler.CONTINUE


def test_ahead_on_must_name_objectives():
    with pytest.raises(ValueError, match=r"ahead_on names \['test_acc'\]"):
        evidence_scheduler(ahead_on=["test_acc"])
    with pytest.raises(ValueError, match="names no objective"):
        evidence_scheduler(ahead_on=[])


def test_ahead_on_accuracy_below_the_line_speed_alone_stops_no_one_either():
    scheduler = evidence_scheduler(ahead_on=["best_val_acc"])
    slow = in_turn(scheduler, ("a", 1300, 0.52), ("b", 1250, 0.52), ("slow", 600, 0.53))
    assert slow == TrialScheduler.CONTINUE  # at chance with them: only slower
    # the fastest, at chance among peers that learned: behind them on accuracy, stopped
    scheduler = evidence_scheduler(ahead_on=["best_val_acc"])
    chance = in_turn(scheduler, ("a", 1300, 0.80), ("b", 1250, 0.75), ("chance", 2600, 0.51))
    assert chance == TrialScheduler.STOP
    assert "it trails a most on best_val_acc: 0.51 against 0.8" in scheduler.stopped["chance"]


def test_a_search_started_before_ahead_on_resumes_with_any_objective_deciding():
    scheduler = evidence_scheduler(min_accuracy=None, ahead_on=["best_val_acc"])
    del scheduler.ahead_on  # as unpickled from a search saved before it was kept
    trials = ("a", 1300, 0.70), ("b", 1290, 0.71), ("slow", 600, 0.69)
    assert in_turn(scheduler, *trials, width=0.02) == TrialScheduler.STOP


def test_a_trial_warming_up_meets_each_rung_at_its_epochs_at_full_rate_among_peers_at_theirs():
    scheduler = evidence_scheduler(rungs=[1, 2])
    scheduler.on_trial_result(None, fake_trial("a"), timed(1, 1300, 0.80))
    scheduler.on_trial_result(None, fake_trial("b"), timed(1, 1250, 0.75))
    warming = SimpleNamespace(trial_id="warming", config={"epochs": 8, "warmup_epochs": 2})
    for epoch in (1, 2):  # inside its warmup: at no rung, judged by none, a peer to none
        assert scheduler.on_trial_result(None, warming, timed(epoch, 1280, 0.51)) == "CONTINUE"
    assert "warming" not in scheduler.seen[1] and 2 not in scheduler.seen
    # epoch 3, its first at full rate: rung 1, where a's and b's first epochs are
    assert scheduler.on_trial_result(None, warming, timed(3, 1280, 0.51)) == "STOP"
    detail = scheduler.stopped["warming"]
    assert "(rung 1 of 2, its epoch 1 at full rate after 2 of warmup)" in detail


def test_a_trial_that_learns_after_its_warmup_goes_on_where_its_peers_were_at_full_rate_as_long():
    scheduler = evidence_scheduler(rungs=[1, 2])
    for trial_id, accuracy in (("a", 0.80), ("b", 0.75)):
        scheduler.on_trial_result(None, fake_trial(trial_id), timed(1, 1300, accuracy))
    warming = SimpleNamespace(trial_id="warming", config={"epochs": 8, "warmup_epochs": 2})
    assert scheduler.on_trial_result(None, warming, timed(3, 1300, 0.78)) == "CONTINUE"
    assert "warming" in scheduler.seen[1]


# --- slow starts -----------------------------------------------------------------------------


def test_a_trial_still_at_chance_at_its_first_rung_goes_on_and_is_stopped_if_still_there_next():
    scheduler = evidence_scheduler(rungs=[1, 2], slow_start_rungs=1)
    assert in_turn(scheduler, ("a", 1300, 0.80), ("b", 1250, 0.75), ("slow", 1280, 0.51)) == (
        "CONTINUE"
    )
    assert "slow" in scheduler.seen[1]  # a peer at the rung all the same
    for trial_id, accuracy in (("a", 0.82), ("b", 0.78)):
        scheduler.on_trial_result(None, fake_trial(trial_id), timed(2, 1300, accuracy, 0.01))
    assert scheduler.on_trial_result(None, fake_trial("slow"), timed(2, 1280, 0.52, 0.01)) == (
        "STOP"
    )
    assert scheduler.stopped["slow"].startswith("stopped at epoch 2 (rung 2 of 2): best_val_acc")


def test_a_slow_starter_that_learns_by_the_next_rung_goes_on():
    scheduler = evidence_scheduler(rungs=[1, 2], slow_start_rungs=1)
    in_turn(scheduler, ("a", 1300, 0.80), ("b", 1250, 0.75), ("slow", 1300, 0.51))
    for trial_id, accuracy in (("a", 0.82), ("b", 0.78)):
        scheduler.on_trial_result(None, fake_trial(trial_id), timed(2, 1300, accuracy, 0.01))
    assert scheduler.on_trial_result(None, fake_trial("slow"), timed(2, 1300, 0.80, 0.01)) == (
        "CONTINUE"
    )
    assert not scheduler.stopped


def test_at_its_first_rung_a_trial_above_chance_and_clearly_behind_is_still_stopped():
    scheduler = evidence_scheduler(rungs=[1, 2], slow_start_rungs=1)
    assert in_turn(scheduler, ("a", 1300, 0.85), ("b", 1300, 0.84), ("behind", 1300, 0.60)) == (
        "STOP"
    )
    assert "it trails a most on best_val_acc: 0.6 against 0.85" in scheduler.stopped["behind"]


def test_slow_starts_are_spared_at_as_many_first_rungs_as_set_and_none_without():
    at_chance = ("a", 1300, 0.80), ("b", 1250, 0.75), ("slow", 1280, 0.51)
    assert in_turn(evidence_scheduler(slow_start_rungs=0), *at_chance) == "STOP"
    assert in_turn(evidence_scheduler(slow_start_rungs=1), *at_chance) == "CONTINUE"
    spared_twice = evidence_scheduler(rungs=[1, 2, 4], slow_start_rungs=2)
    in_turn(spared_twice, *at_chance)
    for trial_id, accuracy in (("a", 0.82), ("b", 0.78), ("slow", 0.52)):
        decision = spared_twice.on_trial_result(
            None, fake_trial(trial_id), timed(2, 1300, accuracy, 0.01)
        )
    assert decision == "CONTINUE" and not spared_twice.stopped


def test_a_search_started_before_slow_starts_resumes_stopping_them_at_the_first_rung():
    scheduler = evidence_scheduler(slow_start_rungs=1)
    del scheduler.slow_start_rungs  # as unpickled from a search saved before it was kept
    assert in_turn(scheduler, ("a", 1300, 0.80), ("b", 1250, 0.75), ("slow", 1280, 0.51)) == (
        "STOP"
    )


# --- still at chance after the first rung ----------------------------------------------------


def at_rung_two(scheduler: ParetoEarlyStopping, *trials: tuple[str, float]) -> str:
    """Each (trial, accuracy) reports its second epoch, as fast as the others, in turn: the
    scheduler's decision on the last."""
    for trial, accuracy in trials:
        decision = scheduler.on_trial_result(
            None, fake_trial(trial), timed(2, 1300, accuracy, 0.01)
        )
    return decision


def test_after_its_first_rung_a_trial_still_at_chance_is_stopped_by_one_peer_clearly_above():
    # two of three at chance: the share kept (ceil(0.5 x 3) ahead) would let both go on
    scheduler = evidence_scheduler(rungs=[1, 2], at_chance_after=1)
    assert at_rung_two(scheduler, ("learns", 0.75), ("also at chance", 0.50), ("b", 0.50)) == (
        "STOP"
    )
    assert scheduler.stopped["b"].startswith(
        "stopped at epoch 2 (rung 2 of 2): still at chance, best_val_acc 0.500 below the min "
        "accuracy 0.550 after 1 rung (stopped by any trial above it beyond the noise), "
        "dominated by 1 of the 2 trials that reached it before (learns); it trails learns "
        "most on best_val_acc: 0.5 against 0.75, "
    )
    # one peer is evidence enough: fewer trials at the rung than min_peers
    alone = evidence_scheduler(rungs=[1, 2], at_chance_after=1)
    assert at_rung_two(alone, ("learns", 0.75), ("b", 0.50)) == "STOP"


def test_a_trial_still_at_chance_goes_on_where_no_peer_is_clearly_above_it():
    # 0.56 is above the min accuracy but within the noise of 0.50 on 400 images
    scheduler = evidence_scheduler(rungs=[1, 2], at_chance_after=1)
    assert at_rung_two(scheduler, ("barely", 0.56), ("b", 0.50)) == "CONTINUE"
    # nor is one at chance stopped by a peer at chance a little ahead of it
    assert at_rung_two(scheduler, ("ahead", 0.54), ("c", 0.50)) == "CONTINUE"
    assert not scheduler.stopped


def test_at_its_first_rung_a_trial_at_chance_keeps_the_share_and_the_min_peers():
    scheduler = evidence_scheduler(rungs=[1, 2], at_chance_after=1)
    assert in_turn(scheduler, ("learns", 1300, 0.75), ("b", 1300, 0.50)) == "CONTINUE"


def test_without_at_chance_after_a_trial_still_at_chance_is_judged_as_any():
    for scheduler in (
        evidence_scheduler(rungs=[1, 2], at_chance_after=None),
        evidence_scheduler(rungs=[1, 2]),  # the scheduler alone: as before
    ):
        assert at_rung_two(scheduler, ("learns", 0.75), ("at chance", 0.50), ("b", 0.50)) == (
            "CONTINUE"
        )


def test_a_slow_start_spared_is_stopped_still_at_chance_only_after_it():
    scheduler = evidence_scheduler(rungs=[1, 2, 4], slow_start_rungs=2, at_chance_after=1)
    assert at_rung_two(scheduler, ("learns", 0.75), ("b", 0.50)) == "CONTINUE"
    for trial_id, accuracy in (("learns", 0.80), ("b", 0.50)):
        decision = scheduler.on_trial_result(
            None, fake_trial(trial_id), timed(4, 1300, accuracy, 0.01)
        )
    assert decision == "STOP" and "still at chance" in scheduler.stopped["b"]


def test_a_search_started_before_at_chance_after_resumes_with_the_rule_it_began_with():
    scheduler = evidence_scheduler(rungs=[1, 2], at_chance_after=1)
    del scheduler.at_chance_after  # as unpickled from a search saved before it was kept
    assert at_rung_two(scheduler, ("learns", 0.75), ("at chance", 0.50), ("b", 0.50)) == (
        "CONTINUE"
    )


def test_the_search_stops_trials_still_at_chance_after_the_first_rung_unless_told_not_to():
    assert EarlyStoppingSection().at_chance_after == 1
    assert EarlyStoppingSection(at_chance_after=None).at_chance_after is None
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        EarlyStoppingSection(at_chance_after=0)


def test_a_trial_at_chance_that_reached_its_rung_first_meets_its_peers_there_at_a_later_epoch():
    scheduler = evidence_scheduler(rungs=[1, 2, 4], at_chance_after=1)
    first = fake_trial("first")
    for epoch in (1, 2):  # alone at both rungs: nobody to compare with
        assert scheduler.on_trial_result(None, first, timed(epoch, 1300, 0.50, 0.01)) == (
            "CONTINUE"
        )
    for epoch, accuracy in ((1, 0.60), (2, 0.75)):
        scheduler.on_trial_result(None, fake_trial("learns"), timed(epoch, 1300, accuracy, 0.01))
    assert scheduler.on_trial_result(None, first, timed(3, 1300, 0.50, 0.01)) == "STOP"
    assert scheduler.stopped["first"].startswith(
        "stopped at epoch 3 (after rung 2 of 3): still at chance, best_val_acc 0.500 below the "
        "min accuracy 0.550 after 2 rungs (stopped by any trial above it beyond the noise), "
        "dominated by 1 of the 1 trials at that rung (learns); it trails learns most on "
        "best_val_acc: 0.5 against 0.75"
    )


def test_between_rungs_a_trial_still_at_chance_is_stopped_only_past_its_second_rung():
    scheduler = evidence_scheduler(rungs=[2, 4], at_chance_after=1)
    scheduler.on_trial_result(None, fake_trial("learns"), timed(2, 1300, 0.80, 0.01))
    for trial_id, epoch, accuracy in (("before its first rung", 1, 0.50),
                                      ("between its first rungs", 3, 0.50),
                                      ("learning", 3, 0.62)):  # fmt: skip
        decision = scheduler.on_trial_result(
            None, fake_trial(trial_id), timed(epoch, 1300, accuracy, 0.01)
        )
        assert decision == "CONTINUE", trial_id  # rung 2 is its first: judged as any
    for epoch in (4, 5):
        scheduler.on_trial_result(None, fake_trial("learns"), timed(epoch, 1300, 0.82, 0.01))
    assert scheduler.on_trial_result(None, fake_trial("late"), timed(5, 1300, 0.50, 0.01)) == (
        "STOP"
    )  # past rung 4, its second: against the peers there
    assert scheduler.on_trial_result(None, fake_trial("last"), timed(8, 1300, 0.50, 0.01)) == (
        "CONTINUE"
    )  # at its last epoch nothing is left to save


@pytest.mark.parametrize("epoch", [4, 5], ids=["at its second rung", "after it"])
def test_a_trial_still_at_chance_is_judged_on_accuracy_whatever_it_left_unscored(epoch):
    """A gap whose best epoch went unscored is NaN: below the min accuracy only the accuracy
    decides, so a trial still at chance is stopped by a peer clearly above it all the same
    (at the rung it stays a peer there); a trial above the min accuracy with an objective
    missing goes on, and is nobody's peer; one without an accuracy is not judged."""
    scheduler = evidence_scheduler(rungs=[2, 4], at_chance_after=1)
    for rung in (2, 4):
        scheduler.on_trial_result(None, fake_trial("learns"), timed(rung, 1300, 0.82, 0.01))
    unscored = {**timed(epoch, 1300, 0.50, 0.01), "gen_gap": math.nan}
    assert scheduler.on_trial_result(None, fake_trial("at chance"), unscored) == "STOP"
    assert "still at chance, best_val_acc 0.500" in scheduler.stopped["at chance"]
    above = {**timed(epoch, 1300, 0.60, 0.01), "gen_gap": math.nan}
    assert scheduler.on_trial_result(None, fake_trial("above"), above) == "CONTINUE"
    no_accuracy = {**timed(epoch, 1300, math.nan, 0.01)}
    assert scheduler.on_trial_result(None, fake_trial("unscored"), no_accuracy) == "CONTINUE"
    at_the_rung = {"learns", "at chance"} if epoch == 4 else {"learns"}
    assert set(scheduler.seen[4]) == at_the_rung


def test_between_rungs_a_slow_start_is_spared_until_its_rungs_are_passed():
    """Slow starts spared at the first two rungs: between the second and the third a trial
    still at chance goes on; past the third it is stopped by a peer clearly above it."""
    scheduler = evidence_scheduler(rungs=[1, 2, 4], at_chance_after=1, slow_start_rungs=2)
    for epoch in (1, 2):
        scheduler.on_trial_result(None, fake_trial("learns"), timed(epoch, 1300, 0.82, 0.01))
    slow = timed(3, 1300, 0.50, 0.01)
    assert scheduler.on_trial_result(None, fake_trial("slow"), slow) == "CONTINUE"
    scheduler.on_trial_result(None, fake_trial("learns"), timed(4, 1300, 0.84, 0.01))
    late = timed(5, 1300, 0.50, 0.01)
    assert scheduler.on_trial_result(None, fake_trial("late"), late) == "STOP"
