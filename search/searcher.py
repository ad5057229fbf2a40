"""The search algorithm: an Optuna study, multi-objective, asked and told through Ray
Tune's public `Searcher` interface and Optuna's ask-and-tell.

Ray's `OptunaSearch` tells Optuna COMPLETE for any trial whose last result carries the
objectives, FAIL for one that raised, which TPE ignores, so out-of-memory regions would be
proposed again; and changing that meant reaching into its private attributes. This
searcher owns its study instead: Tune sees only `suggest`, `on_trial_complete`, `save` and
`restore`, Optuna only `ask`, `tell` and its trials' attributes.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from ray.tune.search import Searcher

from search.feasibility import MemoryFootprint, MemoryModel, OomForecast, Prediction
from search.space import SpaceParam
from search.trainable import PREDICTED_FROM, PREDICTED_PEAK, REPEAT_OF, without_notes
from trainables.metrics import (
    OOM_CAUSE_CARD,
    STATUS_OK,
    STATUS_OOM,
    STATUS_OOM_PREDICTED,
    STATUS_STOPPED_EARLY,
)
from trainables.settings import TrainSettings

optuna.logging.set_verbosity(optuna.logging.WARNING)  # Tune's table shows the progress

# Suggestions predicted to run out of memory that one `suggest` skips before it gives up
# and hands Tune one that ends at once (a space that is nearly all over budget).
MAX_SKIPS_PER_SUGGESTION = 50
# Samples a learning sampler is asked for, per suggestion, while its sample would run out
# of memory (`FeasibleCandidates`); the last is kept, and the driver's check still applies.
CANDIDATES_PER_SUGGESTION = 10
# User attributes of the Optuna trials; `started` is False for a suggestion skipped at the
# driver (no Tune trial, no actor).
STATUS_ATTR, DETAIL_ATTR, STARTED_ATTR = "status", "status_detail", "started"
PREDICTED_ATTR, ALLOWED_ATTR = "predicted_peak_mb", "allowed_mb"


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


@dataclass(frozen=True)
class _Repeat:
    params: dict[str, Any]
    seed: int
    of: str  # the Tune trial id of the config's first seed


class FeasibilityAwareOptunaSearch(Searcher):
    """Optuna's suggestions for Tune, kept off the front where infeasible, and never started
    where they are known to run out of memory.

    - A trial whose last result is not `status: ok` (out of memory, diverged, stopped
      early) reaches Optuna as PRUNED, never as COMPLETE; one that could not fit in memory
      also carries a violated constraint, so the samplers treat its region as infeasible.
    - A suggestion that will run out of memory is told to Optuna as `oom_predicted` and
      replaced by the next one before Tune starts a trial for it: when a config needing no
      more memory already ran out of its own share (`search.feasibility.needs_at_least`;
      an OOM that came from a full card, `oom_cause: card`, teaches nothing), or when its
      predicted peak passes its budget (`search.feasibility.MemoryModel`, fitted to every
      peak the trials report). After `MAX_SKIPS_PER_SUGGESTION` in a row the next one is
      handed to Tune marked, and ends before training.
    - Partial points (the `grid` entries of a space) are suggested first.
    - With `repeats` > 1 every sampled config is suggested that many times in a row, with
      seeds seed, seed + 1, ...; all of them carry `repeat_of`: the first trial's id.
    """

    def __init__(
        self,
        space: Mapping[str, SpaceParam],
        objectives: Mapping[str, str],
        sampler: optuna.samplers.BaseSampler,
        *,
        grid: Sequence[dict[str, Any]] = (),
        fixed_config: Mapping[str, Any] | None = None,
        repeats: int = 1,
        storage: str | None = None,
        study_name: str | None = None,
        memory: MemoryModel | None = None,
    ) -> None:
        super().__init__(metric=list(objectives), mode=list(objectives.values()))
        self._distributions = {key: param.to_optuna() for key, param in space.items()}
        self._objectives = dict(objectives)
        self._fixed_config = dict(fixed_config or {})
        self._forecast = OomForecast(memory)  # what ran out, and the memory model
        self._study = optuna.create_study(
            storage=storage,
            study_name=study_name,
            sampler=FeasibleCandidates(
                sampler, self._forecast, self._fixed_config, self._distributions
            ),
            directions=["maximize" if d == "max" else "minimize" for d in objectives.values()],
            load_if_exists=True,
        )
        self._grid = list(grid)
        self._base_seed = TrainSettings.from_config(self._fixed_config).seed  # of repeats
        self._repeats = repeats
        self._pending_repeats: list[_Repeat] = []
        # Tune trial id -> its Optuna trial and settings, until it is told
        self._live: dict[str, tuple[optuna.Trial, TrainSettings]] = {}

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict, **spec: Any
    ) -> bool:
        """The space came with the constructor; Tune's copy of it only labels its table."""
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        for skipped in range(MAX_SKIPS_PER_SUGGESTION + 1):
            repeat = self._pending_repeats.pop(0) if self._pending_repeats else None
            trial, suggestion = self._ask(repeat, trial_id)
            settings = TrainSettings.from_config(
                {**self._fixed_config, **without_notes(suggestion)}
            )
            verdict = self._forecast.verdict(settings)
            prediction = verdict.prediction
            if not verdict.runs_out:
                break
            reason = _oom_reason(verdict.failed_like, prediction)
            if skipped == MAX_SKIPS_PER_SUGGESTION:  # hand it over; it ends at once
                suggestion[PREDICTED_FROM] = reason
                break
            self._skip(trial, reason, prediction)
        if repeat is None and self._repeats > 1:
            self._pending_repeats += [
                _Repeat(trial.params, self._base_seed + k, trial_id)
                for k in range(1, self._repeats)
            ]
        if prediction is not None:  # beside the trial's measured peak: the model's accuracy
            trial.set_user_attr(PREDICTED_ATTR, prediction.predicted_mb)
            suggestion[PREDICTED_PEAK] = round(prediction.predicted_mb, 3)
        trial.set_user_attr(STARTED_ATTR, True)
        self._live[trial_id] = (trial, settings)
        return suggestion

    def _ask(self, repeat: _Repeat | None, trial_id: str) -> tuple[optuna.Trial, dict[str, Any]]:
        # Exactly one point is enqueued right before each ask, so repeats and the grid keep
        # their order; Optuna samples the keys a partial (grid) point leaves out.
        if repeat is not None:
            self._study.enqueue_trial(repeat.params)
        elif self._grid:
            self._study.enqueue_trial(self._grid.pop(0))
        trial = self._study.ask(self._distributions)
        suggestion = dict(trial.params)
        if repeat is not None:
            suggestion |= {"seed": repeat.seed, REPEAT_OF: repeat.of}
        elif self._repeats > 1:
            suggestion |= {"seed": self._base_seed, REPEAT_OF: trial_id}
        return trial, suggestion

    def _skip(self, trial: optuna.Trial, reason: str, prediction: Prediction | None) -> None:
        if prediction is not None:
            trial.set_user_attr(PREDICTED_ATTR, prediction.predicted_mb)
            trial.set_user_attr(ALLOWED_ATTR, prediction.allowed_mb)
        trial.set_user_attr(STARTED_ATTR, False)
        self._tell_pruned(trial, STATUS_OOM_PREDICTED, f"not started: {reason}", infeasible=True)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        if trial_id not in self._live:
            return
        trial, settings = self._live.pop(trial_id)
        if error or result is None:
            self._study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            return
        status = result.get("status", STATUS_OK)
        self._learn_memory(trial_id, settings, status, result)
        if status != STATUS_OK:
            # Stopped early is a feasible config that trailed; the others cannot finish.
            detail = str(result.get("status_detail", ""))
            infeasible = status != STATUS_STOPPED_EARLY
            self._tell_pruned(trial, status, detail, infeasible=infeasible)
            return
        values = [result.get(name, math.nan) for name in self._objectives]
        if any(not isinstance(v, int | float) or math.isnan(v) for v in values):
            self._study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            return
        trial.set_user_attr(STATUS_ATTR, STATUS_OK)
        self._study.tell(trial, [float(v) for v in values], skip_if_finished=True)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """A trial's first epoch measured its first full-size step from an empty cache: the
        memory model learns from that report (a later epoch's reserved peak also holds the
        blocks evaluation left cached)."""
        if trial_id in self._live and result.get("epoch") == 1:
            self._observe_memory(self._live[trial_id][1], result)

    def _learn_memory(
        self, trial_id: str, settings: TrainSettings, status: str, result: dict[str, Any]
    ) -> None:
        """An out-of-memory end goes into the memory model (on CPU with what the step
        needed) and, where the trial's own share ran out, becomes a failure that later
        suggestions are compared with."""
        if status != STATUS_OOM:
            return
        self._observe_memory(settings, result)
        if result.get("oom_cause") != OOM_CAUSE_CARD:
            ran_with = _whole(result.get("physical_batch_size"))
            self._forecast.failures[trial_id] = MemoryFootprint.of(settings, batch_size=ran_with)

    def _observe_memory(self, settings: TrainSettings, result: Mapping[str, Any]) -> None:
        ran_with = _whole(result.get("physical_batch_size"))
        memory = self._forecast.memory
        if ran_with is not None and memory is not None:
            limit = _number(result.get("memory_limit_mb"))
            memory.observe(settings, ran_with, _reserved_peak(result), limit)

    def _tell_pruned(self, trial: optuna.Trial, status: str, detail: str, infeasible: bool):
        trial.set_user_attr(STATUS_ATTR, status)
        trial.set_user_attr(DETAIL_ATTR, detail)
        if infeasible:
            trial.set_constraint("feasible", 1.0)  # > 0: violated
        self._study.tell(trial, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)

    # --- Tune saves the searcher with the experiment and restores it on --resume -----------

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as handle:
            pickle.dump(self.__dict__, handle)

    def restore(self, checkpoint_path: str) -> None:
        """After a driver was killed, trials the study started after the last saved state
        belong to no Tune trial; they are told FAIL so that none stays RUNNING."""
        with open(checkpoint_path, "rb") as handle:
            saved = pickle.load(handle)
        if "_forecast" not in saved:  # saved before `OomForecast`: its sampler is unwrapped
            saved["_forecast"] = OomForecast(saved.pop("_memory", None))
            saved["_forecast"].failures.update(saved.pop("_failures", {}))
        self.__dict__.update(saved)
        running = {
            trial.number
            for trial in self._study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
            )
        }
        # A trial told to Optuna after the last save is finished there; Tune runs it again,
        # and its second result must not be told twice (Optuna refuses that).
        self._live = {
            trial_id: (trial, settings)
            for trial_id, (trial, settings) in self._live.items()
            if trial.number in running
        }
        live = {trial.number for trial, _ in self._live.values()}
        for number in running - live:
            self._study.tell(number, state=optuna.trial.TrialState.FAIL)

    @property
    def study(self) -> optuna.Study:
        return self._study

    @property
    def failures(self) -> dict[str, MemoryFootprint]:
        return dict(self._forecast.failures)

    @property
    def forecast(self) -> OomForecast:
        return self._forecast


class FeasibleCandidates(optuna.samplers.BaseSampler):
    """The study's sampler, asked again while its sample is a config that will run out of
    memory (`OomForecast`: like a trial that did, or over budget by the memory model).

    A learning sampler (TPE, NSGA-II) proposes from what it has seen, and told an
    infeasible point only as a bad one, TPE kept proposing the same over-budget region
    (docs/RESULTS.md, section 4). Here each of up to `CANDIDATES_PER_SUGGESTION` samples
    is its own best proposal, so the first that fits is the sampler's best among those
    that fit. Only whole relative samples are judged: the random start-up (and random
    search) are left as they are, and a suggestion that still runs out is caught at the
    driver. Optuna's public `BaseSampler` interface, delegating every call.
    """

    def __init__(
        self,
        inner: optuna.samplers.BaseSampler,
        forecast: OomForecast,
        fixed_config: Mapping[str, Any],
        distributions: Mapping[str, optuna.distributions.BaseDistribution],
    ) -> None:
        self.inner = inner
        self.forecast = forecast  # the searcher's own: what it learns, this judges by
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


def _oom_reason(failed_like: str | None, prediction: Prediction | None) -> str:
    """Why a suggestion will run out of memory, for its `status_detail`."""
    if failed_like is not None:
        return f"trial {failed_like} ran out of memory and this config needs at least as much"
    assert prediction is not None
    return prediction.reason()


def _only_value(distribution: optuna.distributions.BaseDistribution) -> Any:
    """The one value a `single()` distribution takes."""
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return distribution.choices[0]
    return distribution.low  # type: ignore[attr-defined]  (Float- or IntDistribution)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _reserved_peak(result: Mapping[str, Any]) -> float:
    """What the trial's first full-size step reserved: what its limit is checked against
    (`peak_mem_mb`, the tensors' peak, from trials that reported no reserved peak)."""
    reserved = _number(result.get("peak_reserved_mb"))
    return reserved if math.isfinite(reserved) else _number(result.get("peak_mem_mb"))


def _whole(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else None


def build_searcher(
    space: Mapping[str, SpaceParam],
    objectives: Mapping[str, str],
    sampler: optuna.samplers.BaseSampler,
    grid: Sequence[dict[str, Any]] = (),
    fixed_config: Mapping[str, Any] | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    repeats: int = 1,
    memory: MemoryModel | None = None,
) -> FeasibilityAwareOptunaSearch:
    """`storage`: an Optuna RDB URL, so the study outlives the process (resume, review)."""
    return FeasibilityAwareOptunaSearch(
        space,
        objectives,
        sampler,
        grid=grid,
        fixed_config=fixed_config,
        repeats=repeats,
        storage=storage,
        study_name=study_name,
        memory=memory,
    )
