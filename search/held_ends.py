"""Held ends: with `search.lag`, a trial whose end would leave its slot idle while the next
suggestion still waits for another trial is held at its last report, so that the search
never has two idle processes.

Why: Tune keeps one idle trial process at most (`reuse_actors`: where no trial waits for
one, its cache keeps a single process). A lagged suggestion waits for the trials `lag` or
more places before it (`search.searcher.InOrder`); while it waits a slot that freed sits
idle, and when the trial it waited for ends too, that trial's process was stopped. Its
replacement takes seconds to start (a fresh worker imports torch), and meanwhile trials of
an epoch or two kept taking the one process left (Tune hands a waiting trial the idle
process and stops the one starting for it), so the search ran on one slot until a longer
trial let the new process start (docs/RESULTS.md, sections 64-65).

Holding: at the report after which a trial would end (the rule stops it, or it is pruned,
or at its last epoch), where the next suggestion would still wait for another running
trial, the scheduler answers Tune's NOOP instead (Tune asks the trial for nothing more and
keeps its process), and tells the order that the trial has ended (`InOrder.end_held`), as
Tune would have told it. Once no trial is waiting for a process and the next suggestion
waits for nobody, it stops the held trial (`stop_trial`, which a Tune scheduler may call),
one per step of Tune's loop: its process is then the idle one that the next trial takes.
Without a lag nothing is held. The ablations hold ends the same way while a base's noise
floor still runs (`search.ablation_searcher.ScreenedAblations`: the next ablation trial
waits for the floor's last run).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Protocol

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from trainables.metrics import is_last_report
from trainables.settings import DEFAULT_EPOCHS


class Order(Protocol):
    """What holding reads of the trials' order: the search's, `search.searcher.InOrder` (not
    imported: the searcher's module imports the trainable's, which imports the rule's), or
    the ablations', `search.ablation_searcher.ScreenedAblations`."""

    @property
    def holds_ends(self) -> bool: ...  # whether a suggestion may wait for a running trial

    def waits(self, ending: str | None = None) -> bool: ...

    def end_held(self, trial_id: str, result: dict[str, Any], stopped: bool) -> None: ...


class HoldsEnds(FIFOScheduler):
    """Tune's first-in-first-out scheduler that holds ends (see the module docstring) once
    `keep_processes` gave it the search's order; a subclass decides stops in `decide`."""

    # a scheduler pickled before ends were held (`Tuner.restore`) holds none
    in_order: Order | None = None
    held: Mapping[str, str] = MappingProxyType({})  # trial id -> the decision held back
    # a held trial was stopped and its process is Tune's idle one until the next trial
    # takes it: a trial that ends meanwhile is held too, or its process would be a second
    released: bool = False

    def keep_processes(self, in_order: Order) -> None:
        """Hold ends for `in_order` (none where it `holds_ends` not: a search without a lag)."""
        self.in_order = in_order

    def decide(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        """Tune's decision for `trial` at `result`, before any hold: go on."""
        return TrialScheduler.CONTINUE

    def ended_result(self, trial_id: str, result: dict[str, Any], decision: str) -> dict[str, Any]:
        """The last result of a trial as the searcher would read it at its end."""
        return result

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if trial.trial_id in self.held:  # a result buffered after the one it is held at
            return TrialScheduler.NOOP
        decision = self.decide(tune_controller, trial, result)
        in_order = self.in_order
        if in_order is None or not in_order.holds_ends:
            return decision
        stopped = decision == TrialScheduler.STOP
        epochs = trial.config.get("epochs", DEFAULT_EPOCHS)
        ends = stopped or is_last_report(result, epochs)
        if not ends or not (self.released or in_order.waits(ending=trial.trial_id)):
            return decision
        self.held = {**self.held, trial.trial_id: decision}
        in_order.end_held(trial.trial_id, self.ended_result(trial.trial_id, result, decision),
                          stopped=stopped)  # fmt: skip
        return TrialScheduler.NOOP

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        chosen = super().choose_trial_to_run(tune_controller)
        if chosen is not None:
            self.released = False  # a trial waits for a process: the idle one is taken
        elif self.held:  # no trial waits for a process
            self.release_one(tune_controller)
        return chosen

    def release_one(self, tune_controller: Any) -> None:
        """Stop the first held trial, where the next suggestion waits for no running trial
        (before that its process would idle, and the one that frees next would be lost),
        and none is saving (its last checkpoint: stopping it would drop the save)."""
        if self.in_order is not None and self.in_order.waits():
            return
        for trial in tune_controller.get_trials():
            if trial.trial_id in self.held and not getattr(trial, "is_saving", False):
                self.forget(trial)
                self.released = True
                tune_controller.stop_trial(trial)
                return

    def forget(self, trial: Any) -> None:
        self.held = {key: value for key, value in self.held.items() if key != trial.trial_id}

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self.forget(trial)
        super().on_trial_complete(tune_controller, trial, result)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self.forget(trial)
        super().on_trial_error(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self.forget(trial)
        super().on_trial_remove(tune_controller, trial)
