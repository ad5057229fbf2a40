"""Feasibility before a trial starts: configs that will run out of memory, found two ways.

Monotone: once a config runs out of memory, a config that needs at least as much memory
will too, so it is pruned before it trains. Predicted (`MemoryModel`): a step's peak is a
line in the batch for a given model, image size, precision, checkpointing and optimizer,
so a suggestion whose predicted peak passes what its allocator may reserve (its budget, or
on a card its share less the process's context) is never started.

"At least as much" is judged only where the answer is certain from the settings alone:
the same model and image size, a physical batch (training and evaluation) at least as
large, an optimizer with at least as much state, no memory-saving technique that the
failed trial lacked, every memory-costing one it had and the same of those that save or
cost by the batch (`trainables.techniques`: the same checkpointing; the cuDNN autotuner;
AMP) and no larger budget.
Anything else is left to be tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from search.packing import LIVE_MODELS, MEMORY_MARGIN, share_of_card
from trainables.memory import MIB
from trainables.optimizers import OPTIMIZERS
from trainables.schedules import epoch_schedule
from trainables.settings import TrainSettings
from trainables.techniques import techniques_on


@dataclass(frozen=True)
class MemoryFootprint:
    """The settings that decide how much memory a trial's steps need."""

    model: str
    image_size: int
    batch_size: int  # physical batch of the first epoch (AdaBatch growth past what fits
    # turns into accumulation, so growth alone never runs a trial out of memory)
    eval_batch_size: int
    optimizer_buffers: int  # per-parameter state (trainables.optimizers): SGD 0-1, Adam 2
    savers: frozenset[str]  # techniques on that need no more memory (trainables.techniques)
    costs: frozenset[str]  # techniques on that need no less (the cuDNN autotuner)
    mixed: frozenset[str]  # techniques on that need less or more by the batch (AMP)
    checkpointing: tuple[object, ...] | None  # what is recomputed; None: no checkpointing
    memory_budget_mb: float

    @classmethod
    def of(cls, settings: TrainSettings, batch_size: int | None = None) -> MemoryFootprint:
        """`batch_size`: the physical batch a trial actually ran out of memory with."""
        first = epoch_schedule(
            1,
            batch_size=settings.batch_size,
            accumulation_steps=settings.accumulation_steps,
            lr=settings.base_lr,
            capacity=settings.max_batch_size,
        )
        buffers = OPTIMIZERS[settings.optimizer].state_buffers(settings.momentum)
        checkpointing = None
        if settings.activation_checkpointing:
            checkpointing = (settings.recomputed_modules, settings.recomputed_segments)
        return cls(
            model=settings.model,
            image_size=settings.data.image_size,
            batch_size=batch_size if batch_size is not None else first.batch_size,
            eval_batch_size=settings.eval_batch_size or first.batch_size,
            optimizer_buffers=buffers,
            savers=techniques_on(settings, "saves"),
            costs=techniques_on(settings, "costs"),
            mixed=techniques_on(settings, "mixed"),
            checkpointing=checkpointing,
            memory_budget_mb=settings.memory_budget_mb or math.inf,
        )


def needs_at_least(candidate: MemoryFootprint, failed: MemoryFootprint) -> bool:
    """Whether `candidate` certainly needs at least the memory `failed` ran out of."""
    return (
        candidate.model == failed.model
        and candidate.image_size == failed.image_size
        and candidate.batch_size >= failed.batch_size
        and candidate.eval_batch_size >= failed.eval_batch_size
        and candidate.optimizer_buffers >= failed.optimizer_buffers
        and candidate.savers <= failed.savers
        and candidate.costs >= failed.costs
        and candidate.mixed == failed.mixed
        and (candidate.checkpointing is None or candidate.checkpointing == failed.checkpointing)
        and candidate.memory_budget_mb <= failed.memory_budget_mb
    )


def predicted_oom(
    candidate: MemoryFootprint, failures: Mapping[str, MemoryFootprint]
) -> str | None:
    """The id of a trial that ran out of memory needing no more than `candidate`, if any."""
    for trial_id, failed in failures.items():
        if needs_at_least(candidate, failed):
            return trial_id
    return None


# --- predicted before a trial starts: peak memory as a line in the batch -------------------


def memory_group(footprint: MemoryFootprint) -> MemoryFootprint:
    """The footprint less what a group's line is a function of (the batch) or does not
    depend on (the budget): trials alike in the rest need a + b x batch."""
    return replace(footprint, batch_size=0, eval_batch_size=0, memory_budget_mb=math.inf)


@dataclass(frozen=True)
class Prediction:
    """A suggestion's predicted peak against what its trial may use."""

    batch_size: int
    predicted_mb: float
    allowed_mb: float
    basis: str  # what the line was fitted to
    # From the meter and other groups' figures alone (no trial like it reported): it sizes a
    # packed share, but no suggestion is refused on it.
    borrowed: bool = False

    @property
    def over(self) -> bool:
        return self.predicted_mb > self.allowed_mb

    def reason(self) -> str:
        return (
            f"a training step of {self.batch_size} images is predicted to need "
            f"{self.predicted_mb:.0f} MiB ({self.basis}), over the {self.allowed_mb:.0f} MiB "
            "it may use"
        )


# The exact peak of a group's step at any batch (the CPU meter at the driver), or None.
MeterProbe = Callable[[TrainSettings], Callable[[int], float] | None]


class MemoryModel:
    """Peak MiB of a training step as a line in the physical batch, per `memory_group`,
    against what the trial's allocator may reserve.

    The line is fitted to what the trials measured (`peak_reserved_mb` of their first,
    full-size step at the batch they ran, the CPU meter's figure of a step refused as out of
    memory) by least squares once a group has two batches; where a `probe` is given (the
    CPU meter, measured at the driver on two tiny batches) the line is exact from the start
    for CPU trials, which that meter holds to their budget. On a card (given the meter where
    trials are packed by memory: `search.tuner.memory_model`) the meter counts what
    autograd keeps but not the allocator's rounding or cuDNN's workspaces: its line is below
    the card's by a ratio nearly constant in the batch (0.60-0.88 on an H200 for ResNet-50,
    docs/RESULTS.md section 35), so a group with one batch measured has the meter's line
    scaled through it, and a group with none the meter's line scaled by the largest ratio
    any group showed (`Prediction.borrowed`: it sizes packed shares, refuses nothing).

    The limit is the trial's budget on CPU (`on_gpu` False). On a card it is the GPU share
    or the budget less what the trial's process holds outside the allocator, which only a
    GPU worker can measure: every trial reports it (`memory_limit_mb`), so it is learned
    from the first report, per budget (the smallest, where nodes differ). A prediction is
    made only where the limit is known.

    Packing trials by memory (`packs_search`: the search's name, `search.packing`), a
    trial's share is what its config needs (`share`), so its limit is no share's: a
    suggestion is over only where it passes a whole card less the context (the largest the
    trials reported; the smallest card), or its budget.
    """

    def __init__(
        self, probe: MeterProbe | None = None, on_gpu: bool = False, packs_search: str = ""
    ) -> None:
        self._probe = probe
        self._on_gpu = on_gpu
        self._probed: dict[MemoryFootprint, Callable[[int], float] | None] = {}
        self._measured: dict[MemoryFootprint, dict[int, float]] = {}
        # on a card: the largest measured peak / the meter's at its batch, over the groups
        self._card_over_meter = 0.0
        self._limits: dict[float, float] = {}  # budget (inf: none) -> the allocator's limit
        self._card_mb = math.inf  # the smallest card a trial reported
        self._context_mb = 0.0  # the most a trial's process held outside the allocator
        self.packs_search = packs_search
        self._go_live()

    def __setstate__(self, state: dict[str, object]) -> None:
        # A model saved before limits were learned: on CPU, as before, the budget; before
        # packing: a fixed share.
        defaults = {"_on_gpu": False, "_limits": {}, "_card_mb": math.inf, "_context_mb": 0.0,
                    "packs_search": "", "_card_over_meter": 0.0}  # fmt: skip
        self.__dict__.update({**defaults, **state})
        self._go_live()  # a search resumed: its shares come from the model it saved

    def _go_live(self) -> None:
        if self.packs_search:
            LIVE_MODELS[self.packs_search] = self

    def observe(
        self,
        settings: TrainSettings,
        batch_size: int,
        peak_mb: float,
        limit_mb: float = math.nan,
        card_mb: float = math.nan,
        context_mb: float = math.nan,
    ) -> None:
        """A step of `batch_size` images of a trial with `settings` peaked at `peak_mb`;
        its allocator could reserve `limit_mb`, on a card of `card_mb` where its process
        held `context_mb` outside the allocator (NaN: not reported)."""
        if batch_size > 0 and math.isfinite(peak_mb) and peak_mb > 0:
            group = memory_group(MemoryFootprint.of(settings))
            self._measured.setdefault(group, {})[batch_size] = peak_mb
            meter = self._meter(settings, group) if self._on_gpu else None
            if meter is not None and meter(batch_size) > 0:
                ratio = peak_mb / meter(batch_size)
                self._card_over_meter = max(self._card_over_meter, ratio)
        if math.isfinite(limit_mb) and limit_mb > 0:
            budget = settings.memory_budget_mb or math.inf
            self._limits[budget] = min(limit_mb, self._limits.get(budget, math.inf))
        if math.isfinite(card_mb) and card_mb > 0:
            self._card_mb = min(self._card_mb, card_mb)
        if math.isfinite(context_mb) and context_mb > 0:
            self._context_mb = max(self._context_mb, context_mb)

    def observe_refusal(self, settings: TrainSettings, batch_size: int, limit_mb: float) -> None:
        """A step of `batch_size` images ran out of memory under a limit of `limit_mb` (on a
        card, where the error says no more): packing by memory, it needs more than that,
        which the group's line then holds, so its next share is larger. A fixed share
        learns nothing from it (the failure rule keeps configs like it away)."""
        if not self.packs_search or not (math.isfinite(limit_mb) and limit_mb > 0):
            return
        points = self._measured.setdefault(memory_group(MemoryFootprint.of(settings)), {})
        points[batch_size] = max(points.get(batch_size, 0.0), limit_mb * (1 + MEMORY_MARGIN))

    def limit_mb(self, settings: TrainSettings) -> float | None:
        """What a trial with `settings` may reserve, where known."""
        if not self._on_gpu:
            return settings.memory_budget_mb
        if self.packs_search:
            if not math.isfinite(self._card_mb):
                return None
            return min(self._card_mb, settings.memory_budget_mb or math.inf) - self._context_mb
        return self._limits.get(settings.memory_budget_mb or math.inf)

    def share(self, settings: TrainSettings) -> float | None:
        """The share of a card a trial with `settings` needs (`search.packing`): its
        predicted peak with `MEMORY_MARGIN`, and the context; None where not predicted."""
        prediction = self.predict(settings) if self._on_gpu else None
        if prediction is None:
            return None
        needed = prediction.predicted_mb * (1 + MEMORY_MARGIN) + self._context_mb
        if not needed > 0:  # a line extrapolated below zero: nothing it says can be trusted
            return None
        return share_of_card(needed, self._card_mb)

    def predict(self, settings: TrainSettings) -> Prediction | None:
        """The suggestion's first-epoch step against its limit; None where unknown."""
        allowed = self.limit_mb(settings)
        if allowed is None:
            return None
        footprint = MemoryFootprint.of(settings)
        group = memory_group(footprint)
        batch = footprint.batch_size
        fitted = self._fitted(group)
        if self._on_gpu and fitted is not None:  # the card's own figures: no meter needed
            return Prediction(batch, fitted(batch), allowed, FITTED)
        meter = self._meter(settings, group)
        if not self._on_gpu:  # the meter is what holds a CPU trial: exact where it runs
            line, basis = (meter, METERED) if meter is not None else (fitted, FITTED)
            return None if line is None else Prediction(batch, line(batch), allowed, basis)
        if meter is None:
            return None
        measured = self._measured.get(group, {})
        if measured:  # one batch of this group measured: the meter's line through it
            (at, peak), *_ = measured.items()
            scaled = meter(batch) * peak / meter(at)
            return Prediction(batch, scaled, allowed, f"{METERED}, scaled to a trial like it")
        if self._card_over_meter > 0:
            scaled = meter(batch) * self._card_over_meter
            basis = f"{METERED}, scaled as the trials on the card most needed"
            return Prediction(batch, scaled, allowed, basis, borrowed=True)
        return None

    def _meter(
        self, settings: TrainSettings, group: MemoryFootprint
    ) -> Callable[[int], float] | None:
        """The CPU meter's line for `group` (measured once, with `settings`), if any."""
        if self._probe is not None and group not in self._probed:
            self._probed[group] = self._probe(settings)
        return self._probed.get(group)

    def _fitted(self, group: MemoryFootprint) -> Callable[[int], float] | None:
        points = self._measured.get(group, {})
        return _least_squares(points) if len(points) >= 2 else None


METERED = "the CPU meter at the driver"
FITTED = "a line through the trials' measured peaks"


@dataclass(frozen=True)
class _Line:
    mean_batch: float
    mean_peak: float
    slope: float

    def __call__(self, batch: int) -> float:
        return self.mean_peak + self.slope * (batch - self.mean_batch)


def _least_squares(points: Mapping[int, float]) -> _Line:
    batches, peaks = list(points), list(points.values())
    mean_b, mean_p = sum(batches) / len(batches), sum(peaks) / len(peaks)
    spread = sum((b - mean_b) ** 2 for b in batches)
    slope = sum((b - mean_b) * (p - mean_p) for b, p in zip(batches, peaks, strict=True))
    return _Line(mean_b, mean_p, slope / spread)


@dataclass(frozen=True)
class CpuMeterProbe:
    """The CPU meter at the driver: for trials that run on CPU, where that meter is what
    holds them to their budget, its line is exactly what the trial will measure."""

    num_classes: int

    def __call__(self, settings: TrainSettings) -> Callable[[int], float]:
        import torch  # here: checking a config must not wait for torch

        from trainables.memory import MemoryBudget, metered_step
        from trainables.trial import start_trial

        cpu = torch.device("cpu")
        size = settings.data.image_size
        trial = start_trial(settings, self.num_classes, size, MemoryBudget(cpu), None)
        inputs = torch.randn(4, 3, size, size)
        targets = torch.arange(4) % self.num_classes
        step = metered_step(trial.model.train(), trial.optimizer, inputs, targets, trial.precision)
        return _InMiB(step.peak_bytes)


@dataclass(frozen=True)
class _InMiB:
    peak_bytes: Callable[[int], int]

    def __call__(self, batch: int) -> float:
        return self.peak_bytes(batch) / MIB


class OomVerdict(NamedTuple):
    failed_like: str | None  # a trial that ran out needing no more memory, if any
    prediction: Prediction | None  # the memory model's, where it has one

    @property
    def runs_out(self) -> bool:
        predicted = self.prediction
        over = predicted is not None and predicted.over and not predicted.borrowed
        return self.failed_like is not None or over


class OomForecast:
    """Whether a config will run out of memory, both ways: like a trial that did
    (`failures`, the monotone rule) or over its budget by the memory model. One judgement
    for the suggestion at the driver and the sampler's candidates before it."""

    def __init__(self, memory: MemoryModel | None = None) -> None:
        self.failures: dict[str, MemoryFootprint] = {}  # trial id -> what ran out
        self.memory = memory  # None: the monotone rule only

    def verdict(self, settings: TrainSettings) -> OomVerdict:
        return OomVerdict(
            predicted_oom(MemoryFootprint.of(settings), self.failures),
            self.memory.predict(settings) if self.memory is not None else None,
        )

    def runs_out(self, settings: TrainSettings) -> bool:
        return self.verdict(settings).runs_out
