"""The search algorithm: Optuna, multi-objective, sized to the search.

Ray's `OptunaSearch` tells Optuna COMPLETE for any trial whose last result carries the
objectives, so a trial that ran out of memory would look like a real, finished point.
`FeasibilityAwareOptunaSearch` reads the trial's `status` and tells Optuna otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from ray.tune.search.optuna import OptunaSearch

from trainables.metrics import STATUS_OK

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
    """`OptunaSearch` that tells Optuna a trial which did not end `ok` was PRUNED, and that
    runs partial points (the `grid` entries of a space) first.

    Only trials whose last result says `status: ok` reach Optuna as COMPLETE, so an
    out-of-memory or diverged trial never becomes a point on Optuna's Pareto front.
    """

    def __init__(self, *args: Any, grid: Sequence[dict[str, Any]] = (), **kwargs: Any) -> None:
        # Ray's points_to_evaluate demands every key; Optuna fills in the rest of a
        # partial point itself, so the grid is enqueued once the study exists.
        self._grid = list(grid)
        super().__init__(*args, **kwargs)

    def _setup_study(self, mode: str | list[str]) -> None:
        super()._setup_study(mode)
        for point in self._grid:
            self._ot_study.enqueue_trial(point)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        status = (result or {}).get("status", STATUS_OK)
        if error or status == STATUS_OK or trial_id not in self._ot_trials:
            super().on_trial_complete(trial_id, result=result, error=error)
            return
        ot_trial = self._ot_trials[trial_id]
        ot_trial.set_user_attr("status", status)
        self._ot_study.tell(ot_trial, state=optuna.trial.TrialState.PRUNED)
        self._completed_trials.add(trial_id)

    @property
    def study(self) -> optuna.Study:
        return self._ot_study


def build_searcher(
    objectives: Mapping[str, str],
    sampler: optuna.samplers.BaseSampler,
    grid: Sequence[dict[str, Any]] = (),
) -> FeasibilityAwareOptunaSearch:
    return FeasibilityAwareOptunaSearch(
        metric=list(objectives), mode=list(objectives.values()), sampler=sampler, grid=grid
    )
