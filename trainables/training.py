"""One training loop and one evaluation, over image splits held in host memory.

Every technique is a switch of this one loop: the physical batch and accumulation steps
come from the epoch's schedule (AdaBatch), the learning rate per optimizer step from `lr_at`
(warmup), precision from `Precision` (AMP), activation checkpointing lives in the model, and
augmentation is one call on the batch. The step itself is `train_step`. No DataLoader: a
batch is an index into the split, moved to the device on its own, and normalisation is
one fused op on it there.

The splits stay in host memory (on one node, the object store's single copy that every
trial reads), never in a trial's share of the card: four trials on one card hold no
copies of the data, and `peak_mem_mb` means the training step's peak on CPU and CUDA alike.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn

from trainables.augment import random_crop_flip
from trainables.cuda import synchronize
from trainables.memory import MemoryBudget, StepPeak
from trainables.noise_scale import NoiseMeter, NoiseScale, in_halves, spread_steps
from trainables.precision import Precision
from trainables.schedules import EpochSchedule
from trainables.settings import DEFAULT_NOISE_SPLITS
from trainables.speed import SpeedWindow
from trainables.step import StepOutcome, train_step

# Consecutive steps the GradScaler may skip before the trial counts as diverged: enough to
# back its scale off from 2**16 to 2**-8. A few skips are fp16 doing its job (an overflow
# lowers the scale); this many mean the gradients stay non-finite at any scale.
DIVERGED_AFTER_SKIPPED_STEPS = 24


@dataclass(frozen=True)
class HostSplit:
    """A split in host memory: uint8 images (N, 3, H, W) and int64 labels (N,)."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, indices: torch.Tensor) -> HostSplit:
        return HostSplit(self.images[indices], self.labels[indices])

    @property
    def nbytes(self) -> int:
        return self.images.nbytes + self.labels.nbytes

    def gather(self, indices: torch.Tensor | slice, pin: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch at `indices` (a slice is a view where nothing needs copying), in
        page-locked memory when `pin`, so that its copy to the card runs without blocking."""
        if not pin:
            return self.images[indices], self.labels[indices]
        if isinstance(indices, slice):
            return self.images[indices].pin_memory(), self.labels[indices].pin_memory()
        images = torch.empty((len(indices), *self.images.shape[1:]), dtype=torch.uint8,
                             pin_memory=True)  # fmt: skip
        torch.index_select(self.images, 0, indices, out=images)
        return images, self.labels[indices].pin_memory()


def device_batches(
    split: HostSplit,
    batches: Iterable[torch.Tensor | slice],
    device: torch.device,
    ahead: bool | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(uint8 images, labels) of each batch of indices, on `device`, in order.

    `ahead` (default: on CUDA) gathers batches on a helper thread, up to two ahead, into
    pinned memory and copies each without blocking, so gathering and copying overlap the
    model's work; index_select releases the GIL, so the thread runs alongside. On CPU the
    batch is gathered where the model reads it.
    """
    ahead = device.type == "cuda" if ahead is None else ahead
    pin = device.type == "cuda"
    if not ahead:
        for indices in batches:
            images, labels = split.gather(indices, pin)
            yield images.to(device, non_blocking=pin), labels.to(device, non_blocking=pin)
        return
    upcoming = iter(batches)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches") as pool:
        first_two = itertools.islice(upcoming, 2)
        pending = [pool.submit(split.gather, indices, pin) for indices in first_two]
        while pending:
            images, labels = pending.pop(0).result()
            following = next(upcoming, None)
            if following is not None:
                pending.append(pool.submit(split.gather, following, pin))
            yield images.to(device, non_blocking=pin), labels.to(device, non_blocking=pin)


@dataclass(frozen=True)
class Normaliser:
    """uint8 -> float, (x / 255 - mean) / std per channel, as one multiply-add, in the
    trial's memory layout (channels-last where the trial trains so): every batch the model
    sees, in training and evaluation, comes through here (evaluation's `laid_out` in the
    layout it timed faster, `trainables.eval_choice`)."""

    scale: torch.Tensor  # (1, 3, 1, 1)
    shift: torch.Tensor  # (1, 3, 1, 1)
    memory_format: torch.memory_format = torch.contiguous_format

    @classmethod
    def from_stats(
        cls,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        device: torch.device,
        memory_format: torch.memory_format = torch.contiguous_format,
    ) -> Normaliser:
        """`memory_format`: the model's layout (`trainables.trial.layout_of`), which every batch
        takes."""
        mean_t = torch.tensor(mean, device=device).view(1, -1, 1, 1)
        std_t = torch.tensor(std, device=device).view(1, -1, 1, 1)
        return cls(scale=1.0 / (255.0 * std_t), shift=-mean_t / std_t, memory_format=memory_format)

    def laid_out(self, memory_format: torch.memory_format) -> Normaliser:
        """The same normalisation into `memory_format` (evaluation may score in another
        layout than the model trains in: `trainables.eval_choice`)."""
        if memory_format == self.memory_format:
            return self
        return replace(self, memory_format=memory_format)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        # The uint8 batch takes the layout (a quarter of the float's bytes to move); the
        # multiply-add keeps it.
        laid_out = images.contiguous(memory_format=self.memory_format)
        normalised = torch.addcmul(self.shift, laid_out.float(), self.scale)
        return normalised.contiguous(memory_format=self.memory_format)  # as it is: no copy


@dataclass(frozen=True)
class EpochResult:
    train_loss: float  # over the applied steps; nan or inf when training diverged
    train_acc: float
    images: int  # images trained on (skipped steps included: they cost the same)
    optimizer_steps: int
    seconds: float  # wall time of the training part
    peak_mem_bytes: int  # of the epoch's first step, at the full physical batch
    peak_reserved_bytes: int  # the allocator's reserved memory at that step's peak
    skipped_steps: int = 0  # steps the GradScaler skipped (fp16 overflow)
    skipped_streak: int = 0  # consecutive skipped steps at the end of the epoch
    longest_skipped_run: int = 0  # the longest run of them, the one carried over included
    noise: NoiseScale = field(default_factory=NoiseScale)  # noise-scale estimates, summed
    compile_seconds: float = 0.0  # compiling new batch shapes before the clock (compile_s)

    @property
    def diverged(self) -> bool:
        """The loss stopped being finite: without a GradScaler one step is enough (the
        weights took a non-finite update); with one, a long run of skipped steps."""
        if self.longest_skipped_run >= DIVERGED_AFTER_SKIPPED_STEPS:
            return True
        applied_any = self.optimizer_steps > self.skipped_steps  # else: no loss to judge
        return applied_any and not math.isfinite(self.train_loss)

    def why_diverged(self, epoch: int) -> str:
        """Why `diverged` (epoch `epoch`), in the words of a pruned trial's detail."""
        if self.longest_skipped_run >= DIVERGED_AFTER_SKIPPED_STEPS:
            return (
                f"the GradScaler skipped {self.longest_skipped_run} steps in a row in epoch "
                f"{epoch}: the gradients stayed non-finite at every loss scale"
            )
        return f"training loss became {self.train_loss} in epoch {epoch}"


def batch_slices(count: int, batch_size: int) -> list[slice]:
    """Consecutive batches covering `count` items; the last may be partial.

    A last batch of a single image is left out: BatchNorm cannot train on one image.
    """
    slices = [slice(start, min(start + batch_size, count)) for start in range(0, count, batch_size)]
    if len(slices) > 1 and slices[-1].stop - slices[-1].start == 1:
        slices.pop()
    return slices


def step_groups(count: int, batch_size: int, accumulation_steps: int) -> list[list[slice]]:
    """Micro-batches grouped into optimizer steps. A partial last group is kept: its step
    averages over the images it has, never silently dropped."""
    slices = batch_slices(count, batch_size)
    return [slices[i : i + accumulation_steps] for i in range(0, len(slices), accumulation_steps)]


def with_noise_splits(groups: list[list[slice]], splits: int) -> tuple[list[list[slice]], set[int]]:
    """The epoch's steps as trained when the gradient noise scale is measured, and which
    steps are measured. With accumulation, `splits` steps spread over the epoch after its
    first (`DEFAULT_NOISE_SPLITS` where `splits` is 0), at most half of those, are measured
    as they train: the meter's hooks cost an epoch of the small CNN measured whole 5-12% on
    a CPU (docs/RESULTS.md, section 60), which the config's speed must not carry (its timed
    blocks leave measured steps out), so the rest are timed; without accumulation, `splits`
    steps spread so are trained as two halves. The first step always runs at the full
    physical batch: it is the step whose peak is the trial's `peak_mem_mb`, and where a
    batch too large fails first."""
    if any(len(group) > 1 for group in groups):
        count = min(splits or DEFAULT_NOISE_SPLITS, (len(groups) - 1) // 2)
        chosen = {1 + step for step in spread_steps(len(groups) - 1, count)}
        return groups, {step for step in chosen if len(groups[step]) > 1}
    halved = {1 + step for step in spread_steps(len(groups) - 1, splits)}
    split = [in_halves(group[0]) if step in halved else group for step, group in enumerate(groups)]
    return split, {step for step in halved if len(split[step]) > 1}


@dataclass(frozen=True)
class EpochSteps:
    """An epoch's optimizer steps in the order they train: each a list of micro-batches,
    each the indices of its images in the split; and the steps the gradient noise scale is
    measured on (`with_noise_splits`)."""

    batches: list[list[torch.Tensor]]
    measured: frozenset[int] = frozenset()

    @classmethod
    def drawn(
        cls, count: int, schedule: EpochSchedule, generator: torch.Generator, noise_splits: int = 0
    ) -> EpochSteps:
        """A pass over `count` images in the order `generator` draws, in the plan's
        physical batches and accumulation steps, `noise_splits` of them split in two for
        the noise scale."""
        order = torch.randperm(count, generator=generator)
        groups = step_groups(count, schedule.batch_size, schedule.accumulation_steps)
        groups, measured = with_noise_splits(groups, noise_splits)
        return cls([[order[s] for s in group] for group in groups], frozenset(measured))

    @property
    def first_batch(self) -> torch.Tensor:
        """The first micro-batch: always the full physical batch."""
        return self.batches[0][0]


# Steps between readings of the skipped steps' run: reading waits for the device, so it is
# done every few dozen steps (and at the end of the epoch), and a run long enough to call
# the trial diverged is caught at most this many steps late.
READ_SKIPPED_EVERY = 32


class SkippedSteps:
    """The steps fp16's GradScaler skipped (their gradients overflowed): how many in this
    epoch, and the run of them at its end, carried over from the epoch before, counted on
    the device (no step waits for it). A long run means the gradients stay non-finite at
    any loss scale: the trial diverged."""

    def __init__(self, streak: int = 0) -> None:
        self._streak: torch.Tensor | int = streak
        self._count: torch.Tensor | int = 0
        # the longest run so far: a run that ends between two readings still counts
        self._longest: torch.Tensor | int = streak

    def after(self, skipped: torch.Tensor | None) -> None:
        """After a step: `skipped` as `Precision.step` says it (None: it could not skip)."""
        if skipped is None:
            self._streak = 0
            return
        flag = skipped.long()
        self._count = self._count + flag
        self._streak = (self._streak + 1) * flag  # back to 0 when applied
        self._longest = torch.maximum(torch.as_tensor(self._longest), self._streak)

    @property
    def streak(self) -> int:
        """The run at the end (carried over to the next epoch); waits for the device."""
        return int(self._streak)

    @property
    def longest(self) -> int:
        return int(self._longest)

    @property
    def count(self) -> int:
        return int(self._count)

    @property
    def diverged(self) -> bool:
        return self.longest >= DIVERGED_AFTER_SKIPPED_STEPS


def meter_first_step(
    budget: MemoryBudget,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    split: HostSplit,
    normalise: Normaliser,
    steps: EpochSteps,
    precision: Precision,
) -> int:
    """On CPU, the budget's meter on the epoch's first step, before its clock starts (it
    runs a forward of its own): its peak in bytes, or the out-of-memory error a card of the
    budget's size would raise. On a card 0: its allocator enforces the limit."""
    if budget.card is not None:
        return 0
    first = steps.first_batch
    images, labels = normalise(split.images[first]), split.labels[first]
    return budget.enforce(model, optimizer, images, labels, precision)


class EpochTally:
    """An epoch's images, steps, summed loss and correct images, the loss and the correct
    ones on the device with the steps the GradScaler skipped left out (they trained
    nothing); nothing is read back until `result`."""

    def __init__(self, device: torch.device, skipped: SkippedSteps) -> None:
        self.loss_sum = torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device, dtype=torch.long)
        self.skipped_images: torch.Tensor | int = 0
        self.skipped = skipped
        self.images = 0
        self.steps = 0

    def add(self, outcome: StepOutcome, step: int) -> bool:
        """Counts step number `step`; True when the trial diverged, which is read (a wait
        for the device) only every `READ_SKIPPED_EVERY` steps of fp16's GradScaler."""
        self.images += outcome.images
        self.steps += 1
        self.skipped.after(outcome.skipped)
        if outcome.skipped is None:
            self.loss_sum += outcome.loss_sum
            self.correct += outcome.correct
            return False
        applied = ~outcome.skipped
        self.loss_sum += torch.where(applied, outcome.loss_sum, 0.0)
        self.correct += torch.where(applied, outcome.correct, 0)
        self.skipped_images = self.skipped_images + outcome.skipped.long() * outcome.images
        return step % READ_SKIPPED_EVERY == 0 and self.skipped.diverged

    def means(self) -> tuple[float, float]:
        """(loss, accuracy) over the images of the applied steps; NaN where none was."""
        scored = self.images - int(self.skipped_images)
        if not scored:
            return math.nan, math.nan
        return float(self.loss_sum) / scored, float(self.correct) / scored

    def result(self, seconds: float, peak: StepPeak, noise: NoiseMeter | None) -> EpochResult:
        """The epoch's result; call it past the epoch's last synchronize (no read waits)."""
        train_loss, train_acc = self.means()
        return EpochResult(
            train_loss=train_loss,
            train_acc=train_acc,
            images=self.images,
            optimizer_steps=self.steps,
            seconds=seconds,
            peak_mem_bytes=peak.allocated_bytes,
            peak_reserved_bytes=peak.reserved_bytes,
            skipped_steps=self.skipped.count,
            skipped_streak=self.skipped.streak,
            longest_skipped_run=self.skipped.longest,
            noise=noise.result() if noise else NoiseScale(),
        )


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    split: HostSplit,
    normalise: Normaliser,
    steps: EpochSteps,
    *,
    precision: Precision,
    generator: torch.Generator,
    budget: MemoryBudget | None = None,
    metered: int = 0,
    augment: bool = False,
    lr_at: Callable[[float], float] | None = None,
    skipped: SkippedSteps | None = None,
    noise: NoiseMeter | None = None,
    window: SpeedWindow | None = None,
) -> EpochResult:
    """The epoch's `steps` over `split`, on the model's device.

    Each optimizer step averages the loss over the images of its micro-batches (weighted
    by their sizes), so k micro-batches of b give the update of one batch of k*b.
    `lr_at(fraction of the epoch done)` sets the learning rate before every step. Skipped
    steps are counted on the device and read every `READ_SKIPPED_EVERY` steps: the epoch
    stops early, at such a reading, once `skipped` says the trial diverged. `noise`
    measures the steps `steps.measured` names. `window` passes each step through the
    device's gate and times the configuration's speed (`trainables.speed.SpeedWindow`);
    it is closed at the epoch's end, or when a step fails. The peak memory is that of the
    first step, which always trains the full physical batch (the allocator's statistics, read on the
    host: no wait for the device; on CPU `metered`, the meter's figure from
    `meter_first_step`).
    """
    device = next(model.parameters()).device
    budget = budget or MemoryBudget(device)
    model.train()
    stream = device_batches(split, (batch for group in steps.batches for batch in group), device)

    def micro_batches(count: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for pixels, targets in itertools.islice(stream, count):
            if augment:
                pixels = random_crop_flip(pixels, generator)
            yield normalise(pixels), targets

    tally = EpochTally(device, skipped or SkippedSteps())
    first_step_peak = None
    budget.reset_peak()
    synchronize(device)
    started = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    gated = window.step if window is not None else contextlib.nullcontext
    with contextlib.closing(stream), contextlib.ExitStack() as closing:
        if window is not None:
            closing.callback(window.close)
        for step, group in enumerate(steps.batches):
            if lr_at is not None:
                for param_group in optimizer.param_groups:
                    param_group["lr"] = lr_at(step / len(steps.batches))
            measured = step in steps.measured  # the noise meter's work: not the config's speed
            with gated():
                outcome = train_step(
                    model,
                    optimizer,
                    micro_batches(len(group)),
                    precision,
                    images=sum(len(batch) for batch in group),
                    noise=noise if measured else None,
                )
            if window is not None:
                window.after(outcome.images, timed=not measured)
            first_step_peak = first_step_peak or budget.peak(metered)
            if tally.add(outcome, step):
                break
    synchronize(device)
    seconds = time.perf_counter() - started
    return tally.result(seconds, first_step_peak or budget.peak(metered), noise)


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    split: HostSplit,
    normalise: Normaliser,
    *,
    batch_size: int,
    precision: Precision | None = None,
) -> tuple[float, float]:
    """(accuracy, mean loss) of `model` on `split` in eval mode, on the model's device, in
    the layout `normalise` gives and the precision the trial trains in."""
    device = next(model.parameters()).device
    model.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    batches = [slice(start, start + batch_size) for start in range(0, len(split), batch_size)]
    for pixels, targets in device_batches(split, batches, device):
        inputs = normalise(pixels)
        with precision.autocast() if precision else nullcontext():
            logits = model(inputs)
        loss_sum += F.cross_entropy(logits.float(), targets, reduction="sum")
        correct += (logits.argmax(dim=1) == targets).sum()
    return float(correct) / len(split), float(loss_sum) / len(split)
