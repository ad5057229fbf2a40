"""The thin searcher at the bottom of the search's stack (`search.searcher`): an Optuna study
asked and told through Ray Tune's public `Searcher` interface and Optuna's ask-and-tell.

Ray's `OptunaSearch` tells Optuna COMPLETE for any trial whose last result carries the
objectives, FAIL for one that raised, which TPE ignores, so out-of-memory regions would be
proposed again; and changing that meant reaching into its private attributes. This searcher
owns its study instead: Tune sees only `suggest`, `on_trial_complete` and the state it
saves, Optuna only `ask`, `tell`, `enqueue_trial` and its trials' attributes.

- A trial whose result is not `status: ok` (out of memory, never started, diverged,
  stopped early) reaches Optuna as PRUNED, never COMPLETE; one that could not fit in memory
  or train also carries a violated constraint, so the samplers treat its region as
  infeasible. Its status and why are user attributes, with the notes a wrapper above put in
  its result (`NOTES`: whether it started, the memory model's figures).
- A trial that ran to its end but learned nothing (`best_val_acc` below the min accuracy,
  which keeps it off the report's front and behind every trial above it at a rung) is
  COMPLETE with a violated constraint: told as a plain point, its gap near 0 made it one
  of TPE's best and the sampler proposed more like it (docs/RESULTS.md, section 15).
- Partial points (the `grid` entries of a space) are asked first, Optuna sampling the keys
  they leave out; `ask_next` puts a point before them (the repeats of a config).

`FeasibleCandidates` wraps the study's sampler so that a learning sampler is asked again
while its sample is a config that will run out of memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from search.feasibility import OomForecast
from search.saved_state import SavedAsItsState
from search.space import SpaceParam
from trainables.metrics import STATUS_OK, STATUS_STOPPED_EARLY
from trainables.settings import TrainSettings

optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress table shows the progress

# User attributes of the Optuna trials; `started` is False for a suggestion skipped before
# Tune started a trial for it (no actor).
STATUS_ATTR, DETAIL_ATTR, STARTED_ATTR = "status", "status_detail", "started"
PREDICTED_ATTR, ALLOWED_ATTR = "predicted_peak_mb", "allowed_mb"
# What a result may carry besides the schema's metrics, kept as user attributes.
NOTES = (STARTED_ATTR, PREDICTED_ATTR, ALLOWED_ATTR)
# Samples a learning sampler is asked for, per suggestion, while its sample would run out
# of memory (`FeasibleCandidates`); the last is kept, and the feasibility gate still applies.
CANDIDATES_PER_SUGGESTION = 10
# The constraints a trial may violate: it did not run or fit, or it learned nothing.
FEASIBLE_CONSTRAINT, MIN_ACCURACY_CONSTRAINT = "feasible", "min_accuracy"


def build_sampler(kind: str, num_samples: int, seed: int) -> optuna.samplers.BaseSampler:
    """An Optuna sampler whose start-up phase fits `num_samples` trials.

    Optuna's defaults assume long searches (TPE: 10 random start-up trials; NSGA-II: a
    population of 50), which for a dozen trials means plain random search.
    """
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = startup_trials(kind, num_samples)
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=startup, seed=seed)
    return optuna.samplers.TPESampler(n_startup_trials=startup, seed=seed, multivariate=True)


def startup_trials(kind: str, num_samples: int) -> int:
    """Suggestions the sampler makes before it learns from any: TPE's random start-up (a
    third of the trials), NSGA-II's first generation (a quarter, for a few generations);
    random search never learns."""
    if kind == "random":
        return num_samples
    if kind == "nsga2":
        return max(2, min(50, num_samples // 4))
    return max(2, min(10, num_samples // 3))


class OptunaAskTell(SavedAsItsState):
    """Suggestions are Optuna's asks; results are its tells (see the module docstring)."""

    def __init__(
        self,
        space: Mapping[str, SpaceParam],
        objectives: Mapping[str, str],
        sampler: optuna.samplers.BaseSampler,
        *,
        grid: Sequence[dict[str, Any]] = (),
        storage: str | None = None,
        study_name: str | None = None,
        min_accuracy: float | None = None,
    ) -> None:
        """`min_accuracy`: the `best_val_acc` below which a model learned nothing
        (`trainables.metrics.min_accuracy_for` the data's classes); None: no such bar."""
        super().__init__(metric=list(objectives), mode=list(objectives.values()))
        self.min_accuracy = min_accuracy
        self.distributions = {key: param.to_optuna() for key, param in space.items()}
        self._objectives = dict(objectives)
        self.study = optuna.create_study(
            storage=storage,
            study_name=study_name,
            sampler=sampler,
            directions=["maximize" if d == "max" else "minimize" for d in objectives.values()],
            load_if_exists=True,
        )
        self._grid = list(grid)
        self._next: list[dict[str, Any]] = []  # points asked before the grid (`ask_next`)
        self._live: dict[str, optuna.Trial] = {}  # Tune trial id -> its Optuna trial

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict, **spec: Any
    ) -> bool:
        """The space came with the constructor; Tune's copy of it only labels its table."""
        return True

    def ask_next(self, params: Mapping[str, Any]) -> None:
        """The next suggestion is `params` (a whole point or a partial one)."""
        self._next.append(dict(params))

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        # Exactly one point is enqueued right before each ask, so repeats and the grid keep
        # their order; Optuna samples the keys a partial (grid) point leaves out.
        point = self._next.pop(0) if self._next else self._grid.pop(0) if self._grid else None
        if point is not None:
            self.study.enqueue_trial(point)
        trial = self.study.ask(self.distributions)
        trial.set_user_attr(STARTED_ATTR, True)
        self._live[trial_id] = trial
        return dict(trial.params)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        trial = self._live.pop(trial_id, None)
        if trial is None:
            return
        if error or result is None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            return
        status = result.get("status", STATUS_OK)
        trial.set_user_attr(STATUS_ATTR, status)
        for note in NOTES:
            if result.get(note) is not None:
                trial.set_user_attr(note, result[note])
        if status != STATUS_OK:
            trial.set_user_attr(DETAIL_ATTR, str(result.get("status_detail", "")))
            if status != STATUS_STOPPED_EARLY:  # a feasible config that trailed its peers
                trial.set_constraint(FEASIBLE_CONSTRAINT, 1.0)  # > 0: violated
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
            return
        values = [result.get(name, math.nan) for name in self._objectives]
        if any(not isinstance(v, int | float) or math.isnan(v) for v in values):
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            return
        shortfall = self.accuracy_shortfall(result)
        if shortfall > 0:  # > 0: violated; the further below, the worse to the samplers
            trial.set_constraint(MIN_ACCURACY_CONSTRAINT, shortfall)
        self.study.tell(trial, [float(v) for v in values], skip_if_finished=True)

    def accuracy_shortfall(self, result: Mapping[str, Any]) -> float:
        """How far the trial's `best_val_acc` is below the min accuracy (<= 0: not below,
        or no bar, or no accuracy reported); NaN is below, as the report counts it."""
        accuracy = result.get("best_val_acc")
        if self.min_accuracy is None or not isinstance(accuracy, int | float):
            return 0.0
        return self.min_accuracy - (0.0 if math.isnan(accuracy) else float(accuracy))

    @property
    def forecast(self) -> OomForecast:
        """What ran out and the memory model: kept with the study's sampler, which judges
        its candidates by them, so they are saved and restored once, with the study."""
        sampler = self.study.sampler
        if not isinstance(sampler, FeasibleCandidates):
            raise TypeError("the study's sampler is not FeasibleCandidates: no forecast")
        return sampler.forecast

    def get_state(self) -> dict[str, Any]:
        return dict(self.__dict__)

    # Tune saves the searcher at the bottom of a stack with `save` (`SavedAsItsState`), the
    # layers above it with their `get_state`.

    def set_state(self, state: dict[str, Any]) -> None:
        """After a driver was killed, trials the study started after the last saved state
        belong to no Tune trial; they are told FAIL so that none stays RUNNING. A trial
        told after the last save is finished there; Tune runs it again, and its second
        result must not be told twice (Optuna refuses that)."""
        self.__dict__.update(state)
        running = {
            trial.number
            for trial in self.study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
            )
        }
        self._live = {tid: t for tid, t in self._live.items() if t.number in running}
        live = {trial.number for trial in self._live.values()}
        for number in running - live:
            self.study.tell(number, state=optuna.trial.TrialState.FAIL)


class FeasibleCandidates(optuna.samplers.BaseSampler):
    """The study's sampler, asked again while its sample is a config that will run out of
    memory (`OomForecast`: like a trial that did, or over budget by the memory model).

    A learning sampler (TPE, NSGA-II) proposes from what it has seen, and told an
    infeasible point only as a bad one, TPE kept proposing the same over-budget region
    (docs/RESULTS.md, section 4). Here each of up to `CANDIDATES_PER_SUGGESTION` samples
    is its own best proposal, so the first that fits is the sampler's best among those
    that fit. Only whole relative samples are judged: the random start-up (and random
    search) are left as they are, and a suggestion that still runs out is caught by the
    feasibility gate. Optuna's public `BaseSampler` interface, delegating every call.
    """

    def __init__(
        self,
        inner: optuna.samplers.BaseSampler,
        forecast: OomForecast,
        fixed_config: Mapping[str, Any],
        distributions: Mapping[str, optuna.distributions.BaseDistribution],
    ) -> None:
        self.inner = inner
        self.forecast = forecast  # the search's own: what it learns, this judges by
        # a one-value entry of the space is never sampled: it joins the fixed settings
        self._fixed_config = {
            **fixed_config,
            **{name: _only_value(d) for name, d in distributions.items() if d.single()},
        }
        self._sampled = frozenset(name for name, d in distributions.items() if not d.single())

    def infer_relative_search_space(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial
    ) -> dict[str, optuna.distributions.BaseDistribution]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        search_space: dict[str, optuna.distributions.BaseDistribution],
    ) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for _ in range(CANDIDATES_PER_SUGGESTION):
            params = self.inner.sample_relative(study, trial, search_space)
            if not self._sampled <= params.keys():  # not a whole config: nothing to judge
                return params
            settings = TrainSettings.from_config({**self._fixed_config, **params})
            if not self.forecast.runs_out(settings):
                return params
        return params

    def sample_independent(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        param_name: str,
        param_distribution: optuna.distributions.BaseDistribution,
    ) -> Any:
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        state: optuna.trial.TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


def _only_value(distribution: optuna.distributions.BaseDistribution) -> Any:
    """The one value a `single()` distribution takes."""
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return distribution.choices[0]
    return distribution.low  # type: ignore[attr-defined]  (Float- or IntDistribution)
