"""`search.held_ends.HoldsEnds`: with a lag, a trial whose end would leave its slot idle
while the next suggestion waits for another trial is held at its last report, and the
search keeps its processes."""

import os
import time
from pathlib import Path
from types import SimpleNamespace

from ray import tune
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from search.early_stopping import EarlyStoppedStatus, ParetoEarlyStopping
from search.held_ends import HoldsEnds
from search.searcher import InOrder
from trainables.metrics import STATUS_STOPPED_EARLY


class Recording(Searcher):
    """The layer below: suggests {"n": 0, "epochs": 1}, ... and records what reaches it."""

    def __init__(self) -> None:
        super().__init__(metric="best_val_acc", mode="max")
        self.calls: list[tuple[str, str, dict | None]] = []  # (what, trial id, result)
        self.count = 0

    def suggest(self, trial_id: str) -> dict:
        self.count += 1
        return {"n": self.count - 1, "epochs": 1}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.calls.append(("result", trial_id, result))

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        self.calls.append(("complete", trial_id, result))


def trial(trial_id: str, epochs: int = 1) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id, config={"epochs": epochs}, status="RUNNING")


class Controller:
    """What a Tune scheduler may call on the controller: its trials, and stopping one."""

    def __init__(self, *trials: SimpleNamespace) -> None:
        self.trials = list(trials)
        self.stopped: list[str] = []

    def get_trials(self) -> list[SimpleNamespace]:
        return self.trials

    def stop_trial(self, stopping: SimpleNamespace) -> None:
        self.stopped.append(stopping.trial_id)
        stopping.status = "TERMINATED"


def started(lag: int, trials: int, ids: str) -> tuple[InOrder, Recording]:
    below = Recording()
    in_order = InOrder(below, lag=lag, trials=trials)
    for trial_id in ids:
        in_order.suggest(trial_id)
    return in_order, below


def test_a_suggestion_waits_only_for_running_trials_lag_or_more_places_before_it():
    in_order, _ = started(lag=2, trials=5, ids="ab")
    assert in_order.waits()  # c waits for a
    assert not in_order.waits(ending="a")  # were a to end, c would not
    assert in_order.waits(ending="b")  # b is not what c waits for
    assert not InOrder(Recording(), lag=None, trials=5).waits()


def test_a_trial_ending_while_the_next_suggestion_waits_for_another_is_held_and_ended_in_order():
    in_order, below = started(lag=2, trials=5, ids="ab")
    scheduler = HoldsEnds()
    scheduler.keep_processes(in_order)
    last = {"epoch": 1, "status": "ok", "best_val_acc": 0.7}
    assert scheduler.on_trial_result(None, trial("b"), last) == TrialScheduler.NOOP
    assert scheduler.held == {"b": TrialScheduler.CONTINUE}
    assert scheduler.on_trial_result(None, trial("b"), {**last, "epoch": 2}) == TrialScheduler.NOOP
    in_order.on_trial_result("b", last)  # what Tune tells after a NOOP: dropped
    assert below.calls == []  # b's end waits for a's, in order
    # a's end is what c waits for: not held
    assert scheduler.on_trial_result(None, trial("a"), last) == TrialScheduler.CONTINUE
    in_order.on_trial_result("a", last)
    in_order.on_trial_complete("a", last)
    assert in_order.suggest("c") == {"n": 2, "epochs": 1, "asked": 2}
    in_order.on_trial_complete("b", last)  # Tune's own end of b, once stopped: dropped
    assert in_order.suggest("d") == {"n": 3, "epochs": 1, "asked": 3}
    # b told as Tune tells a trial that ran to its end: its last result, then its end
    assert [(what, trial_id) for what, trial_id, _ in below.calls] == [
        ("result", "a"), ("complete", "a"), ("result", "b"), ("complete", "b")]  # fmt: skip


def test_a_held_trial_is_stopped_once_no_trial_waits_for_a_process_and_nothing_for_another():
    in_order, _ = started(lag=2, trials=5, ids="ab")
    scheduler = HoldsEnds()
    scheduler.keep_processes(in_order)
    b, c = trial("b"), trial("c")
    scheduler.on_trial_result(None, b, {"epoch": 1, "status": "ok"})
    controller = Controller(trial("a"), b)
    assert scheduler.choose_trial_to_run(controller) is None
    assert controller.stopped == []  # c still waits for a: b keeps its process
    in_order.on_trial_complete("a", {"epoch": 1, "status": "ok"})
    in_order.suggest("c")
    c.status = "PENDING"  # c waits for a process: the one a left, idle
    controller.trials.append(c)
    assert scheduler.choose_trial_to_run(controller) is c
    assert controller.stopped == []  # stopped now, b's process would be a second idle one
    c.status = "RUNNING"
    assert scheduler.choose_trial_to_run(controller) is None
    assert controller.stopped == ["b"]


def test_a_trial_ending_after_a_release_and_before_the_next_trial_starts_is_held_too():
    # the released trial's process is Tune's one idle process until the next trial takes it:
    # another ending then, though nothing waits, would have its process stopped
    in_order, _ = started(lag=2, trials=6, ids="ab")
    scheduler = HoldsEnds()
    scheduler.keep_processes(in_order)
    b = trial("b")
    scheduler.on_trial_result(None, b, {"epoch": 1, "status": "ok"})  # held: c waits for a
    in_order.on_trial_complete("a", {"epoch": 1, "status": "ok"})
    in_order.suggest("c")
    controller = Controller(trial("a"), b, trial("c"))
    assert scheduler.choose_trial_to_run(controller) is None and controller.stopped == ["b"]
    assert not in_order.waits(ending="c")  # nothing waits, yet c is held
    assert scheduler.on_trial_result(None, trial("c"), {"epoch": 1}) == TrialScheduler.NOOP
    d = trial("d")
    d.status = "PENDING"  # the next trial, to take b's process
    controller.trials.append(d)
    assert scheduler.choose_trial_to_run(controller) is d
    assert scheduler.on_trial_result(None, trial("e"), {"epoch": 1}) == TrialScheduler.CONTINUE


def test_a_held_trial_saving_its_last_checkpoint_is_stopped_only_once_saved():
    in_order, _ = started(lag=2, trials=5, ids="ab")
    scheduler = HoldsEnds()
    scheduler.keep_processes(in_order)
    b = trial("b")
    scheduler.on_trial_result(None, b, {"epoch": 1, "status": "ok"})
    in_order.on_trial_complete("a", {"epoch": 1, "status": "ok"})
    b.is_saving = True
    controller = Controller(trial("a"), b)
    scheduler.choose_trial_to_run(controller)
    assert controller.stopped == []
    b.is_saving = False
    scheduler.choose_trial_to_run(controller)
    assert controller.stopped == ["b"]


def test_a_trial_that_goes_on_or_ends_while_nothing_waits_is_not_held():
    in_order, _ = started(lag=2, trials=5, ids="ab")
    scheduler = HoldsEnds()
    scheduler.keep_processes(in_order)
    going_on = scheduler.on_trial_result(None, trial("b", epochs=8), {"epoch": 1, "status": "ok"})
    assert going_on == TrialScheduler.CONTINUE
    unlagged = HoldsEnds()
    unlagged.keep_processes(InOrder(Recording(), lag=None, trials=5))
    assert unlagged.on_trial_result(None, trial("b"), {"epoch": 1}) == TrialScheduler.CONTINUE
    assert scheduler.held == {} and unlagged.held == {}


def test_a_trial_the_rule_stops_while_held_ends_marked_as_stopped_early():
    in_order, below = started(lag=2, trials=5, ids="ab")
    rule = ParetoEarlyStopping({"best_val_acc": "max"}, rungs=[1], keep=0.5, min_peers=1)
    rule.keep_processes(in_order)
    rule.on_trial_result(None, trial("a", 8), {"epoch": 1, "status": "ok", "best_val_acc": 0.9})
    in_order.on_trial_complete("a", {"epoch": 8, "status": "ok", "best_val_acc": 0.9})
    in_order.suggest("c")
    behind = {"epoch": 1, "status": "ok", "best_val_acc": 0.5}
    assert rule.on_trial_result(None, trial("c", 8), behind) == TrialScheduler.NOOP  # d waits on b
    told = {**behind}
    EarlyStoppedStatus(rule).on_trial_result(0, [], trial("c", 8), told)
    assert told["status"] == STATUS_STOPPED_EARLY  # Tune's loggers and MLflow read it so
    in_order.on_trial_complete("b", {"epoch": 8, "status": "ok"})
    in_order.suggest("d")
    in_order.suggest("e")  # knows c
    ends = {trial_id: result for what, trial_id, result in below.calls if what == "complete"}
    assert ends["c"]["status"] == STATUS_STOPPED_EARLY  # as the searcher reads a stop
    assert ("result", "c") not in [(what, trial_id) for what, trial_id, _ in below.calls]


def test_a_trial_held_at_its_last_epoch_keeps_its_result_though_the_rule_once_stopped_it():
    # rerun after a restore (it was held, so Tune saved it running): its old stop's detail
    # is back, but this time it ran to its end
    in_order, _ = started(lag=2, trials=5, ids="ab")
    rule = ParetoEarlyStopping({"best_val_acc": "max"}, rungs=[1], keep=0.5, min_peers=1)
    rule.keep_processes(in_order)
    rule.stopped = {"b": "stopped at epoch 1 (rung 1 of 1): ..."}
    last = {"epoch": 2, "status": "ok", "best_val_acc": 0.8}
    assert rule.on_trial_result(None, trial("b", 2), last) == TrialScheduler.NOOP
    told = {**last}
    EarlyStoppedStatus(rule).on_trial_result(0, [], trial("b", 2), told)
    assert told["status"] == "ok"


def sleeper(config: dict, meeting: str) -> None:
    """Trial 0 trains for seconds, trial 1 for a moment, those after it briefly. Trials 0
    and 1 first wait until both run: under the suite's load trial 0's process once started
    after trial 1 had ended, and Tune gave trial 0 trial 1's process (a CI run, 2026-12-08)."""
    n = config["n"]
    if n < 2:
        (Path(meeting) / str(n)).touch()
        deadline = time.monotonic() + 120
        while not (Path(meeting) / str(1 - n)).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    time.sleep([2.0, 0.1][n] if n < 2 else 0.5)
    tune.report({"epoch": 1, "status": "ok", "best_val_acc": 0.5, "pid": os.getpid()})


def processes_of(scheduler: FIFOScheduler, path) -> list[int]:
    """The process each of four trials ran in, two at a time with a lag of 2."""
    in_order = InOrder(Recording(), lag=2, trials=4)
    if isinstance(scheduler, HoldsEnds):
        scheduler.keep_processes(in_order)
    meeting = Path(path) / "meeting"
    meeting.mkdir(parents=True)
    tuner = tune.Tuner(
        tune.with_parameters(sleeper, meeting=str(meeting)),
        tune_config=tune.TuneConfig(search_alg=in_order, scheduler=scheduler, num_samples=4,
                                    max_concurrent_trials=2, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=str(path), verbose=0),
    )  # fmt: skip
    ran = {result.config["n"]: result.metrics["pid"] for result in tuner.fit()}
    return [ran[n] for n in range(4)]


def test_with_a_lag_the_search_keeps_its_processes_where_tune_alone_stops_one(
    ray_instance, tmp_path
):
    # trial 1 ends while trial 2 waits for trial 0: Tune alone keeps trial 1's process idle,
    # then stops trial 0's as it ends (one idle process at most), whatever starts after
    alone = processes_of(FIFOScheduler(), tmp_path / "alone")
    assert alone[0] not in alone[2:]
    held = processes_of(HoldsEnds(), tmp_path / "held")
    assert held[2] == held[0] and held[3] == held[1]  # trial 1 held until trial 2 started
