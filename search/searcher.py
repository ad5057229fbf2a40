"""The search algorithm: Optuna, multi-objective, sized to the search.

Ray's `OptunaSearch` tells Optuna COMPLETE for any trial whose last result carries the
objectives, so a trial that ran out of memory would look like a real, finished point.
`FeasibilityAwareOptunaSearch` reads the trial's `status` and tells Optuna otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from ray.tune.search.optuna import OptunaSearch

from search.feasibility import MemoryFootprint, predicted_oom
from search.trainable import PREDICTED_FROM, REPEAT_OF, without_notes
from trainables.metrics import OOM_CAUSE_CARD, STATUS_OK, STATUS_OOM
from trainables.settings import TrainSettings

optuna.logging.set_verbosity(optuna.logging.WARNING)  # Tune's table shows the progress


def build_sampler(kind: str, num_samples: int, seed: int) -> optuna.samplers.BaseSampler:
    """An Optuna sampler whose start-up phase fits `num_samples` trials.

    Optuna's defaults assume long searches (TPE: 10 random start-up trials; NSGA-II: a
    population of 50), which for a dozen trials means plain random search.
    """
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if kind == "nsga2":
        # A few generations: the population is about a quarter of the trials, at least 2.
        population = max(2, min(50, num_samples // 4))
        return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    startup = max(2, min(10, num_samples // 3))  # a third of the trials explore at random
    return optuna.samplers.TPESampler(n_startup_trials=startup, seed=seed, multivariate=True)


class FeasibilityAwareOptunaSearch(OptunaSearch):
    """`OptunaSearch` that keeps infeasible trials off the front and learns from them.

    - A trial whose last result is not `status: ok` (out of memory, predicted to be, or
      diverged) reaches Optuna as PRUNED with a violated constraint, never as COMPLETE:
      it cannot sit on Optuna's front, and the samplers treat it as infeasible.
    - Once a trial runs out of its own share of memory, a later suggestion that needs at
      least as much (`search.feasibility`) is marked so that it ends before training. An
      OOM that came from a full card (`oom_cause: card`) teaches nothing.
    - Partial points (the `grid` entries of a space) are suggested first.
    - With `repeats` > 1 every sampled config is suggested that many times in a row, with
      seeds seed, seed + 1, ...; all of them carry `repeat_of`: the first trial's id.
    """

    def __init__(
        self,
        *args: Any,
        grid: Sequence[dict[str, Any]] = (),
        fixed_config: Mapping[str, Any] | None = None,
        repeats: int = 1,
        **kwargs: Any,
    ) -> None:
        self._grid = list(grid)
        self._fixed_config = dict(fixed_config or {})
        self._base_seed = TrainSettings.from_config(self._fixed_config).seed  # of repeats
        self._repeats = repeats
        self._pending_repeats: list[dict[str, Any]] = []  # suggestions still to repeat
        self._settings: dict[str, TrainSettings] = {}  # by Tune trial id
        self._failures: dict[str, MemoryFootprint] = {}  # trials that ran out of memory
        super().__init__(*args, **kwargs)

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        # Exactly one point is enqueued right before each ask, so repeats and the grid keep
        # their order. Ray's points_to_evaluate would demand every key; Optuna fills in
        # the rest of a partial (grid) point itself.
        repeat = self._pending_repeats.pop(0) if self._pending_repeats else None
        if repeat is not None:
            self._ot_study.enqueue_trial(repeat["params"])
        elif self._grid:
            self._ot_study.enqueue_trial(self._grid.pop(0))
        suggestion = super().suggest(trial_id)
        if suggestion is None:
            return None
        if repeat is not None:
            suggestion = {**suggestion, "seed": repeat["seed"], REPEAT_OF: repeat["of"]}
        elif self._repeats > 1:
            seed = self._base_seed
            self._pending_repeats += [
                {"params": dict(suggestion), "seed": seed + k, "of": trial_id}
                for k in range(1, self._repeats)
            ]
            suggestion = {**suggestion, "seed": seed, REPEAT_OF: trial_id}
        settings = TrainSettings.from_config({**self._fixed_config, **without_notes(suggestion)})
        self._settings[trial_id] = settings
        source = predicted_oom(MemoryFootprint.of(settings), self._failures)
        return {**suggestion, PREDICTED_FROM: source} if source else suggestion

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        status = (result or {}).get("status", STATUS_OK)
        if error or status == STATUS_OK or trial_id not in self._ot_trials:
            super().on_trial_complete(trial_id, result=result, error=error)
            return
        # An OOM while the card as a whole was full says nothing about the config's needs.
        own_oom = status == STATUS_OOM and (result or {}).get("oom_cause") != OOM_CAUSE_CARD
        if own_oom and trial_id in self._settings:
            ran_with = _whole((result or {}).get("physical_batch_size"))
            self._failures[trial_id] = MemoryFootprint.of(
                self._settings[trial_id], batch_size=ran_with
            )
        ot_trial = self._ot_trials[trial_id]
        ot_trial.set_user_attr("status", status)
        ot_trial.set_user_attr("status_detail", str((result or {}).get("status_detail", "")))
        ot_trial.set_constraint("feasible", 1.0)  # > 0: violated
        self._ot_study.tell(ot_trial, state=optuna.trial.TrialState.PRUNED)
        self._completed_trials.add(trial_id)

    def restore(self, checkpoint_path: str) -> None:
        """After a driver was killed, trials the study started after the last saved state
        belong to no Tune trial; they are told FAIL so that none stays RUNNING."""
        super().restore(checkpoint_path)
        live = {
            trial.number
            for trial_id, trial in self._ot_trials.items()
            if trial_id not in self._completed_trials
        }
        running = self._ot_study.get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
        )
        for orphan in running:
            if orphan.number not in live:
                self._ot_study.tell(orphan.number, state=optuna.trial.TrialState.FAIL)

    @property
    def study(self) -> optuna.Study:
        return self._ot_study

    @property
    def failures(self) -> dict[str, MemoryFootprint]:
        return dict(self._failures)


def _whole(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else None


def build_searcher(
    objectives: Mapping[str, str],
    sampler: optuna.samplers.BaseSampler,
    grid: Sequence[dict[str, Any]] = (),
    fixed_config: Mapping[str, Any] | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    repeats: int = 1,
) -> FeasibilityAwareOptunaSearch:
    """`storage`: an Optuna RDB URL, so the study outlives the process (resume, review)."""
    return FeasibilityAwareOptunaSearch(
        metric=list(objectives),
        mode=list(objectives.values()),
        sampler=sampler,
        grid=grid,
        fixed_config=fixed_config,
        repeats=repeats,
        storage=optuna.storages.RDBStorage(storage) if storage else None,
        study_name=study_name,
    )
