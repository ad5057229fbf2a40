"""The search algorithm: a stack of searchers on Ray Tune's public `Searcher` interface, each
taking on one concern and delegating the rest, around the thin Optuna searcher
(`search.optuna_search.OptunaAskTell`). `build_searcher` puts it together:

    InOrder                 trial k is suggested knowing trials 0..k-lag, whatever ends first
      MemoryLearning        what trials measured goes into the memory model; their OOMs
        FeasibilityGate     a suggestion that will run out of memory is never started
          Repeats           each sampled config again with the next seeds
            OptunaAskTell   Optuna's asks and tells (grid points first)

What ran out and the memory model (`OomForecast`) are kept in one place, the study's
sampler (`FeasibleCandidates`, which judges Optuna's candidates by them): the gate and the
memory learning find it below them, so what is learned is judged by at once. Tune saves
a stack as it saves its own wrappers (`ConcurrencyLimiter`): each layer's `get_state`, and
the Optuna searcher at the bottom with `save`. A search saved before the stack (one
`FeasibilityAwareOptunaSearch` holding every concern) resumes as the stack.
"""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from ray.tune.search import Searcher

from search.feasibility import MemoryFootprint, MemoryModel, OomForecast, Prediction
from search.optuna_search import (
    ALLOWED_ATTR,
    PREDICTED_ATTR,
    STARTED_ATTR,
    FeasibleCandidates,
    OptunaAskTell,
    build_sampler,
)
from search.space import SpaceParam
from search.trainable import without_notes
from trainables.metrics import (
    ASKED,
    OOM_CAUSE_CARD,
    PREDICTED_FROM,
    PREDICTED_PEAK,
    REPEAT_OF,
    STATUS_OOM,
    STATUS_OOM_PREDICTED,
)
from trainables.settings import TrainSettings

__all__ = ["build_sampler", "build_searcher", "optuna_searcher"]

# Suggestions predicted to run out of memory that one `suggest` skips before it gives up
# and hands Tune one that ends at once (a space that is nearly all over budget).
MAX_SKIPS_PER_SUGGESTION = 50


class Delegating(Searcher):
    """A searcher that hands every call on to another (`inner`)."""

    def inner(self) -> Searcher:
        raise NotImplementedError

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict, **spec: Any
    ) -> bool:
        return self.inner().set_search_properties(metric, mode, config, **spec)

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        return self.inner().suggest(trial_id)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.inner().on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        self.inner().on_trial_complete(trial_id, result=result, error=error)


class Wrapper(Delegating):
    """A layer of the stack: it delegates everything to `searcher`, and a subclass takes on
    one concern. Its state is its own attributes (Tune finds the inner searcher's itself)."""

    def __init__(self, searcher: Searcher) -> None:
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher = searcher

    def inner(self) -> Searcher:
        return self.searcher

    @property
    def forecast(self) -> OomForecast:
        """The search's `OomForecast`, found below: it lives with the study's sampler."""
        return self.searcher.forecast

    def get_state(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "searcher"}

    def set_state(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # Tune saves a stack layer by layer; saved directly, the whole stack goes in one file.

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as handle:
            pickle.dump([layer.get_state() for layer in layers_of(self)], handle)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as handle:
            states = pickle.load(handle)
        if isinstance(states, dict):  # saved by the searcher before the stack
            states = _stack_states_of(states)
        for layer, state in zip(layers_of(self), states, strict=True):
            layer.set_state(state)


def layers_of(searcher: Searcher) -> list[Searcher]:
    """The searchers of a stack, from the top down to the Optuna searcher."""
    layers = [searcher]
    while isinstance(layers[-1], Wrapper):
        layers.append(layers[-1].searcher)
    return layers


@dataclass(frozen=True)
class _Repeat:
    """A config's next seed (also the pickled form of a repeat in searches saved before the
    stack)."""

    params: dict[str, Any]
    seed: int
    of: str  # the Tune trial id of the config's first seed


class Repeats(Wrapper):
    """With `repeats` > 1 every sampled config is suggested that many times in a row, with
    seeds seed, seed + 1, ...; all of them carry `repeat_of`: the first trial's id. Each
    repeat is its own Optuna trial (asked for with the same params): every seed is told."""

    def __init__(self, searcher: OptunaAskTell, repeats: int, base_seed: int) -> None:
        super().__init__(searcher)
        self.repeats = repeats
        self.base_seed = base_seed
        self._pending: list[_Repeat] = []

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        repeat = self._pending.pop(0) if self._pending else None
        if repeat is not None:
            self.searcher.ask_next(repeat.params)
        params = self.searcher.suggest(trial_id)
        if params is None or self.repeats == 1:
            return params
        if repeat is not None:
            return {**params, "seed": repeat.seed, REPEAT_OF: repeat.of}
        self._pending += [_Repeat(params, self.base_seed + k, trial_id)
                          for k in range(1, self.repeats)]  # fmt: skip
        return {**params, "seed": self.base_seed, REPEAT_OF: trial_id}

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """A config never started (the gate above skipped its first seed) is not
        repeated."""
        if result is not None and result.get(STARTED_ATTR) is False:
            self._pending = [repeat for repeat in self._pending if repeat.of != trial_id]
        super().on_trial_complete(trial_id, result=result, error=error)


class FeasibilityGate(Wrapper):
    """A suggestion that will run out of memory (`OomForecast`: a config needing no more
    memory already ran out of its own share, or its predicted peak passes its limit) is
    told to the inner searcher as `oom_predicted`, never started, and the next one is asked
    for. After `MAX_SKIPS_PER_SUGGESTION` in a row the next one is handed to Tune marked
    (`oom_predicted_from`), and ends before training. A suggestion that goes ahead carries
    the memory model's figure for it (`predicted_peak_mb`), set beside what it measures."""

    def __init__(self, searcher: Searcher, fixed_config: Mapping[str, Any]) -> None:
        super().__init__(searcher)
        self.fixed_config = dict(fixed_config)

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        for skipped in range(MAX_SKIPS_PER_SUGGESTION + 1):
            suggestion = self.searcher.suggest(trial_id)
            if suggestion is None:
                return None
            settings = settings_of(self.fixed_config, suggestion)
            verdict = self.forecast.verdict(settings)
            prediction = verdict.prediction
            if not verdict.runs_out:
                break
            reason = _oom_reason(verdict.failed_like, prediction)
            if skipped == MAX_SKIPS_PER_SUGGESTION:  # hand it over; it ends at once
                suggestion[PREDICTED_FROM] = reason
                break
            self.searcher.on_trial_complete(trial_id, result=_skipped(reason, prediction))
        if prediction is not None:
            suggestion[PREDICTED_PEAK] = round(prediction.predicted_mb, 3)
        return suggestion


class MemoryLearning(Wrapper):
    """What the trials measured goes into the memory model, and an out-of-memory end of a
    trial's own share becomes a failure later suggestions are compared with (both in the
    `OomForecast` the gate and the sampler judge by).

    A trial's first epoch measured its first full-size step from an empty cache: the model
    learns from that report (a later epoch's reserved peak also holds the blocks evaluation
    left cached); an out-of-memory end adds what the step needed, where known (CPU)."""

    def __init__(self, searcher: Searcher, fixed_config: Mapping[str, Any]) -> None:
        super().__init__(searcher)
        self.fixed_config = dict(fixed_config)
        self._live: dict[str, TrainSettings] = {}  # Tune trial id -> its settings

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        suggestion = self.searcher.suggest(trial_id)
        if suggestion is not None:
            self._live[trial_id] = settings_of(self.fixed_config, suggestion)
        return suggestion

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id in self._live and result.get("epoch") == 1:
            self._observe(self._live[trial_id], result)
        super().on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        settings = self._live.pop(trial_id, None)
        if settings is not None and result is not None and result.get("status") == STATUS_OOM:
            self._observe(settings, result, refused=True)
            # Packed by memory, a config that ran out in its share may fit a larger one: the
            # model learns what it needs instead (`MemoryModel.observe_refusal`).
            packed = self.forecast.memory is not None and self.forecast.memory.packs_search
            if result.get("oom_cause") != OOM_CAUSE_CARD and not packed:
                ran_with = _whole(result.get("physical_batch_size"))
                self.forecast.failures[trial_id] = MemoryFootprint.of(settings, ran_with)
        super().on_trial_complete(trial_id, result=result, error=error)

    def _observe(
        self, settings: TrainSettings, result: Mapping[str, Any], refused: bool = False
    ) -> None:
        ran_with = _whole(result.get("physical_batch_size"))
        memory = self.forecast.memory
        if ran_with is None or memory is None:
            return
        peak, limit = _reserved_peak(result), _number(result.get("memory_limit_mb"))
        memory.observe(
            settings, ran_with, peak, limit, card_mb=_number(result.get("card_mb")),
            context_mb=_number(result.get("card_context_mb")),
        )  # fmt: skip
        if refused and not math.isfinite(peak) and result.get("oom_cause") != OOM_CAUSE_CARD:
            memory.observe_refusal(settings, ran_with, limit)  # on a card: no peak to learn


class InOrder(Wrapper):
    """Trial k (the k-th suggestion handed to Tune, from 0) is suggested knowing exactly
    trials 0..k-`lag`, told to the layers below in that order, and the trials between as
    running: the order trials end in (the machine's timing) no longer changes what is
    suggested next. A suggestion waits (None: Tune asks again) until every trial `lag` or
    more places before it has ended; the results of those after are held until then
    (intermediate ones too: what the memory model learns, and when, is as ordered). With a
    lag each suggestion carries its place (`asked`), which the rungs judge it by
    (`search.early_stopping.ParetoEarlyStopping`: its peers are the trials `lag` places
    before it or more, all of which have ended). `lag` None: everything passes at once, as
    it arrives. Once all `trials` were suggested and have ended, the held ones are told.

    A suggestion that waits leaves a slot idle, and where two slots freed while it waited
    one lost its process (Tune keeps one idle process at most), whose replacement took
    seconds to start (docs/RESULTS.md, section 64): the search's scheduler holds such a
    trial at its last report instead (`search.held_ends.HoldsEnds`), and tells this layer
    of its end then (`end_held`), so that the next suggestion can go to the process freed
    first."""

    _held: frozenset[str] = frozenset()  # a searcher saved before trials were held: none

    def __init__(self, searcher: Searcher, lag: int | None, trials: int) -> None:
        super().__init__(searcher)
        self.lag, self.trials = lag, trials
        self._asked: list[str] = []  # Tune trial ids in the order they were suggested
        self._told = 0  # trials told below, in that order
        self._results: dict[str, list[dict[str, Any]]] = {}  # held intermediate results
        self._ended: dict[str, tuple[dict[str, Any] | None, bool]] = {}  # held ends

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        place = len(self._asked)
        if self.lag is not None:
            known = max(0, place - self.lag + 1)  # trials 0..place-lag
            if any(asked not in self._ended for asked in self._asked[self._told : known]):
                return None  # one of them still runs: wait for it
            self._tell_up_to(known)
        suggestion = self.searcher.suggest(trial_id)
        if suggestion is not None:
            self._asked.append(trial_id)
            if self.lag is not None:  # without one no rule reads it: the config as before
                suggestion[ASKED] = place
        return suggestion

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id in self._held:
            return  # the result it was held at: told as its end already
        if self._holds(trial_id):
            self._results.setdefault(trial_id, []).append(result)
        else:
            super().on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        if trial_id in self._held:
            self._held -= {trial_id}  # its end, told when it was held
            return
        if not self._holds(trial_id):
            super().on_trial_complete(trial_id, result=result, error=error)
            return
        self._ended[trial_id] = (result, error)
        waiting = self._asked[self._told :]
        if len(self._asked) >= self.trials and all(t in self._ended for t in waiting):
            self._tell_up_to(len(self._asked))  # the search's end: nothing left to wait for

    @property
    def holds_ends(self) -> bool:
        """Whether a suggestion may wait for a running trial (with a lag)."""
        return self.lag is not None

    def waits(self, ending: str | None = None) -> bool:
        """Whether the next suggestion would wait for a running trial (one other than
        `ending`, were that one to end now)."""
        place = len(self._asked)
        if self.lag is None or place >= self.trials:
            return False
        known = max(0, place - self.lag + 1)
        return any(t != ending and t not in self._ended for t in self._asked[self._told : known])

    def end_held(self, trial_id: str, result: dict[str, Any], stopped: bool) -> None:
        """`trial_id` is held at its last report, `result` (`search.held_ends`): for the
        order it ends now, told as Tune tells an end (a trial the scheduler stopped by its
        last result alone, another by that result and then its end); what Tune tells of it
        later (that result again, its end) is dropped."""
        if not stopped:
            self.on_trial_result(trial_id, result)
        self.on_trial_complete(trial_id, result=result)
        self._held |= {trial_id}

    def _holds(self, trial_id: str) -> bool:
        """Whether the trial's results wait for their turn (a trial of this search not yet
        told below; a trial suggested before a lag was kept passes)."""
        return self.lag is not None and trial_id in self._asked[self._told :]

    def _tell_up_to(self, known: int) -> None:
        """Tell the layers below every trial before place `known`, in order (all ended)."""
        while self._told < known:
            trial_id = self._asked[self._told]
            for result in self._results.pop(trial_id, []):
                super().on_trial_result(trial_id, result)
            result, error = self._ended.pop(trial_id)
            self._told += 1
            super().on_trial_complete(trial_id, result=result, error=error)


# The stack's layers from the top, as `build_searcher` puts them together (and
# `_stack_states_of` lists an old searcher's states).
LAYERS: tuple[type[Searcher], ...] = (
    InOrder,
    MemoryLearning,
    FeasibilityGate,
    Repeats,
    OptunaAskTell,
)


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
    min_accuracy: float | None = None,
    lag: int | None = None,
    trials: int = 0,
) -> InOrder:
    """The stack (see the module docstring). `storage`: an Optuna RDB URL, so the study
    outlives the process (resume, review). `min_accuracy`: see `OptunaAskTell`. `lag` and
    `trials` (the suggestions Tune will ask for): see `InOrder`."""
    fixed = dict(fixed_config or {})
    optuna_search = OptunaAskTell(
        space, objectives, sampler, grid=grid, storage=storage, study_name=study_name,
        min_accuracy=min_accuracy,
    )  # fmt: skip
    # What ran out, and the memory model: one forecast for all layers, with the sampler.
    optuna_search.study.sampler = FeasibleCandidates(
        sampler, OomForecast(memory), fixed, optuna_search.distributions
    )
    base_seed = TrainSettings.from_config(fixed).seed
    gated = FeasibilityGate(Repeats(optuna_search, repeats, base_seed), fixed)
    return InOrder(MemoryLearning(gated, fixed), lag, trials)


def optuna_searcher(searcher: Searcher) -> OptunaAskTell:
    """The Optuna searcher at the bottom of a stack (its study, for review and tests)."""
    if isinstance(searcher, FeasibilityAwareOptunaSearch):
        searcher = searcher.stack
    bottom = layers_of(searcher)[-1]
    if not isinstance(bottom, OptunaAskTell):
        raise TypeError(f"no Optuna searcher under {type(searcher).__name__}")
    return bottom


def settings_of(fixed_config: Mapping[str, Any], suggestion: Mapping[str, Any]) -> TrainSettings:
    """The trainable settings a suggestion runs with: the fixed ones and the sampled."""
    return TrainSettings.from_config({**fixed_config, **without_notes(suggestion)})


def _skipped(reason: str, prediction: Prediction | None) -> dict[str, Any]:
    """What the inner searcher is told of a suggestion the gate never started."""
    result: dict[str, Any] = {
        "status": STATUS_OOM_PREDICTED,
        "status_detail": f"not started: {reason}",
        STARTED_ATTR: False,
    }
    if prediction is not None:
        result |= {PREDICTED_ATTR: prediction.predicted_mb, ALLOWED_ATTR: prediction.allowed_mb}
    return result


def _oom_reason(failed_like: str | None, prediction: Prediction | None) -> str:
    """Why a suggestion will run out of memory, for its `status_detail`."""
    if failed_like is not None:
        return f"trial {failed_like} ran out of memory and this config needs at least as much"
    assert prediction is not None
    return prediction.reason()


def _whole(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _reserved_peak(result: Mapping[str, Any]) -> float:
    """What the trial's first full-size step reserved: what its limit is checked against
    (`peak_mem_mb`, the tensors' peak, from trials that reported no reserved peak)."""
    reserved = _number(result.get("peak_reserved_mb"))
    return reserved if math.isfinite(reserved) else _number(result.get("peak_mem_mb"))


# --- searches saved before the stack ------------------------------------------------------


class FeasibilityAwareOptunaSearch(Delegating):
    """The one searcher that held every concern before the stack. A search started then
    pickled it in its tuner.pkl: unpickled on --resume it becomes the stack (`stack`), and
    the state it saved (one dictionary of its attributes) the stack's. Tune sees it as one
    searcher, not a wrapper (it has no `searcher`), and saves and restores it whole."""

    def __setstate__(self, old: dict[str, Any]) -> None:
        self.stack = _stack_from(old)
        Searcher.__init__(self, metric=self.stack.metric, mode=self.stack.mode)

    def inner(self) -> Searcher:
        return self.stack

    def save(self, checkpoint_path: str) -> None:
        self.stack.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.stack.restore(checkpoint_path)


def _stack_from(old: dict[str, Any]) -> InOrder:
    """The stack with the layers an old searcher's attributes describe."""
    layers = [kind.__new__(kind) for kind in LAYERS]
    for layer, below in itertools.pairwise(layers):
        layer.searcher = below
    for layer, state in zip(layers, _stack_states_of(old), strict=True):
        Searcher.__init__(layer, metric=old.get("_metric"), mode=old.get("_mode"))
        layer.set_state(state)
    return layers[0]


def _stack_states_of(old: dict[str, Any]) -> list[dict[str, Any]]:
    """The states of the stack's layers, from the top, out of an old searcher's
    attributes. A forecast saved before `OomForecast` (failures and memory model as two
    attributes) is put together, and kept with the study's sampler; repeats that were
    waiting go on as repeats, each told to Optuna as its own trial as before; trials are
    told as they end, as then (`InOrder` without a lag)."""
    forecast = old.get("_forecast")
    if forecast is None:
        forecast = OomForecast(old.get("_memory"))
        forecast.failures.update(old.get("_failures", {}))
    study = old["_study"]
    live = old.get("_live", {})
    fixed = old.get("_fixed_config", {})
    if isinstance(study.sampler, FeasibleCandidates):
        study.sampler.forecast = forecast
    else:  # saved before the sampler was asked again: it is, from now on
        study.sampler = FeasibleCandidates(study.sampler, forecast, fixed, old["_distributions"])
    learning = {
        "fixed_config": fixed,
        "_live": {trial_id: settings for trial_id, (_, settings) in live.items()},
    }
    gate = {"fixed_config": fixed}
    repeats = {
        "repeats": old.get("_repeats", 1),
        "base_seed": old.get("_base_seed", 0),
        "_pending": list(old.get("_pending_repeats", [])),
    }
    asktell = {
        "distributions": old["_distributions"],
        "_objectives": old["_objectives"],
        "study": study,
        "_grid": old.get("_grid", []),
        "_next": [],
        "_live": {trial_id: trial for trial_id, (trial, _) in live.items()},
    }
    in_order = {"lag": None, "trials": 0, "_asked": [], "_told": 0, "_results": {}, "_ended": {}}
    return [in_order, learning, gate, repeats, asktell]
