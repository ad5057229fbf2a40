"""A trial's memory: its budget, what fits in it, and the peak of a training step.

`MemoryBudget` is the one place that decides whether a step fits and holds the trial to
its limit: on CUDA through the allocator's limit (the trial's share of the card less what
its process holds outside the allocator, see `cuda_share`; the card itself is
`trainables.cuda.TorchCudaCard`), on CPU through the meter below. The peak of a training
step (`StepPeak`) is the CUDA allocator's, its live tensors and the memory it reserved for
them (what its limit is checked against), or on CPU the meter's, which stands for both.
`StepLine` is a step's peak as a line in the batch, through the peaks at two probe batches:
how the capacity table predicts the largest batch that fits.

The CPU has no allocator peak that belongs to one trial (the process's RSS also holds the
dataset, Python and torch's caches), so on CPU we count what a step must hold at its peak,
the moment backward starts:

    parameters + gradients + optimizer state + the input batch
    + every tensor autograd saved for backward (each storage once, parameters excluded)

With activation checkpointing (`trainables.activation_checkpointing`) the forward keeps only each
recomputed region's input (a block, or a segment of a sequence); the region's own
activations come back while it is recomputed in backward. So the peak is the largest of:
everything saved when backward starts, and for each region, while it is recomputed, what
was saved before it + the inputs of the regions up to it + what it saves itself.

It is an upper bound on the step's live tensors (gradients are counted as if all existed
while every activation is still alive) and ignores the allocator's caching and the
temporaries inside single operators. So it reads lower than what a GPU would need, but it
moves with the physical batch, the autocast dtype (AMP stores bf16 activations and bf16
copies of the weights) and what is saved for backward (checkpointing), as GPU memory does.

The meter runs a separate forward pass on the step's batch (no optimizer step, batch-norm
statistics restored), so measuring never changes what is trained.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainables.activation_checkpointing import recording_regions
from trainables.cuda import MIB, TorchCudaCard, indexed
from trainables.oom import MemoryBudgetExceeded, is_out_of_memory, release_memory
from trainables.precision import Precision
from trainables.step import dry_step, statistics_kept


def _storage_key(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def unique_storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views share one storage)."""
    return sum(nbytes for _, nbytes in {_storage_key(t) for t in tensors})


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's per-parameter state, or what its first step will create.

    SGD with momentum keeps one buffer per parameter, Adam two (three with amsgrad).
    """
    existing = [
        value
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor) and value.numel() > 1  # not step counters
    ]
    if existing:
        return unique_storage_bytes(existing)
    total = 0
    for group in optimizer.param_groups:
        if isinstance(optimizer, torch.optim.Adam):
            buffers = 3 if group.get("amsgrad") else 2
        else:
            buffers = 1 if group.get("momentum", 0) else 0
        total += buffers * sum(p.numel() * p.element_size() for p in group["params"])
    return total


class _Timeline:
    """What a forward saves for backward, in order, and where each recomputed region (a
    checkpointed block or segment) starts: the regions run plainly while it records, so
    their saved tensors are seen instead of being dropped for recomputation."""

    def __init__(self, exclude: set[tuple[int, int]]) -> None:
        self.exclude = exclude
        self.outside: dict[tuple[int, int], int] = {}  # storage -> regions started before it
        self.kept: list[dict[tuple[int, int], int]] = []  # each region's inputs
        self.inside: list[dict[tuple[int, int], int]] = []  # what each region saves
        self._current: int | None = None
        self._held: list[torch.Tensor] = []

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = _storage_key(tensor)
        if key in self.exclude:
            return tensor
        if self._current is not None:
            self.inside[self._current][key] = key[1]
        else:
            self.outside.setdefault(key, len(self.kept))
        return tensor

    @contextmanager
    def region(self, inputs: Sequence[torch.Tensor]) -> Iterator[None]:
        keys = {_storage_key(tensor) for tensor in inputs} - self.exclude
        self.kept.append({key: key[1] for key in keys})
        # Held until the timeline goes, as the checkpoint holds them: an input nothing else
        # keeps would be freed, and a later tensor at its address would pass for it.
        self._held.extend(inputs)
        self.inside.append({})
        self._current = len(self.kept) - 1
        try:
            yield
        finally:
            self._current = None

    def parts(self) -> SavedParts:
        """The bytes alive at each moment of backward that can be its peak."""
        everything = {key: key[1] for key in self.outside}
        for kept in self.kept:
            everything.update(kept)
        moments = [sum(everything.values())]  # backward starts: nothing freed yet
        for region, saved in enumerate(self.inside):
            # Recomputing this region: what was saved before it and the inputs of the
            # regions up to it are alive; everything backward has passed is freed.
            alive = {key: key[1] for key, before in self.outside.items() if before <= region}
            for kept in self.kept[: region + 1]:
                alive.update(kept)
            fresh = sum(size for key, size in saved.items() if key not in alive)
            moments.append(sum(alive.values()) + fresh)
        return SavedParts(tuple(moments))


@dataclass(frozen=True)
class SavedParts:
    """What a training step keeps for backward at each moment that can be its peak: when
    backward starts, and (with checkpointing) while each region is recomputed."""

    moments: tuple[int, ...]

    def peak(self) -> int:
        return max(self.moments)


def saved_parts(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, precision: Precision
) -> SavedParts:
    """What one training step on `inputs` saves for backward, moment by moment."""
    # Parameters and the batch are counted once, by `step_peak_bytes`.
    exclude = {_storage_key(p) for p in model.parameters()} | {_storage_key(inputs)}
    timeline = _Timeline(exclude)
    with (
        statistics_kept(model),
        torch.enable_grad(),
        torch.autograd.graph.saved_tensors_hooks(timeline.pack, lambda tensor: tensor),
        recording_regions(timeline),
        precision.autocast(),
    ):
        F.cross_entropy(model(inputs), targets)
    return timeline.parts()


def activation_bytes(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, precision: Precision
) -> int:
    """What one training step keeps for backward at its peak (see the module docstring)."""
    return saved_parts(model, inputs, targets, precision).peak()


def step_peak_bytes(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    precision: Precision,
) -> int:
    """The CPU meter's peak for one training step on `inputs`."""
    return (
        _fixed_bytes(model, optimizer)
        + unique_storage_bytes([inputs])
        + activation_bytes(model, inputs, targets, precision)
    )


def _fixed_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """What a step holds whatever its batch: the parameters, gradients, optimizer state."""
    params = [p for p in model.parameters() if p.requires_grad]
    return 2 * unique_storage_bytes(params) + optimizer_state_bytes(optimizer)


# Two batches small enough to cost almost nothing, large enough for batch norm to train.
_PROBE_SIZES = (2, 4)


@dataclass(frozen=True)
class MeteredStep:
    """The CPU meter's peak of a training step as a function of its batch size.

    What is alive at each moment of the step is affine in the batch (fixed bytes plus
    bytes per image), so the moments measured at two small batches give it exactly; only
    the largest of them is not, so each moment is extrapolated on its own and the largest
    is taken at the batch asked for.
    """

    fixed_bytes: int  # parameters, gradients, optimizer state
    image_bytes: int  # one input image
    at_small: SavedParts  # at _PROBE_SIZES[0] images
    at_large: SavedParts  # at _PROBE_SIZES[1] images

    def peak_bytes(self, batch_size: int) -> int:
        small, large = _PROBE_SIZES

        def at_size(low: int, high: int) -> int:
            return low + (high - low) * (batch_size - small) // (large - small)

        parts = SavedParts(
            tuple(
                at_size(low, high)
                for low, high in zip(self.at_small.moments, self.at_large.moments, strict=True)
            )
        )
        return self.fixed_bytes + self.image_bytes * batch_size + parts.peak()


def metered_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    precision: Precision,
) -> MeteredStep:
    """The meter's step as a function of the batch, from the first 2 and 4 of `inputs`."""
    if len(inputs) < _PROBE_SIZES[1]:
        raise ValueError(f"the meter needs {_PROBE_SIZES[1]} images, got {len(inputs)}")
    at_small, at_large = (
        saved_parts(model, inputs[:b], targets[:b], precision) for b in _PROBE_SIZES
    )
    image_bytes = inputs[0].numel() * inputs.element_size()
    return MeteredStep(_fixed_bytes(model, optimizer), image_bytes, at_small, at_large)


def extrapolated_step_peak_bytes(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    precision: Precision,
) -> int:
    """The meter's peak for a step on all of `inputs`, measured on its first 2 and 4 images
    (`MeteredStep`): a step that cannot fit is refused after two tiny forwards instead of
    one forward of the whole batch."""
    if len(inputs) <= _PROBE_SIZES[1]:
        return step_peak_bytes(model, optimizer, inputs, targets, precision)
    return metered_step(model, optimizer, inputs, targets, precision).peak_bytes(len(inputs))


# --- a step's peak as a line in the batch, from two probe batches ------------------------------

# The probe batches on a card: small enough to fit any share a model trains in at all,
# apart enough that the allocator's block rounding (2 MiB) is lost in the slope.
CARD_PROBE_BATCHES = (16, 64)


@dataclass(frozen=True)
class StepLine:
    """A training step's peak (bytes) as a line in its physical batch, through the peaks
    measured at two batches: what is fixed (weights, gradients, optimizer state) and what
    each image adds (its activations)."""

    small: int
    large: int
    at_small: int
    at_large: int

    @property
    def per_image(self) -> float:
        return (self.at_large - self.at_small) / (self.large - self.small)

    def at(self, batch: int) -> float:
        return self.at_small + self.per_image * (batch - self.small)

    def largest_within(self, limit_bytes: float) -> int:
        """The largest batch whose predicted peak stays within `limit_bytes`; 0 if none.
        A line that does not grow with the batch puts no bound on it (returns 0 if even
        its fixed part is over)."""
        if self.per_image <= 0:
            return 0 if self.at_small > limit_bytes else MAX_BATCH
        largest = self.small + (limit_bytes - self.at_small) / self.per_image
        return max(0, min(MAX_BATCH, int(largest)))


MAX_BATCH = 1 << 16  # "fits anything we would try": no batch is predicted or probed beyond


def in_mib(nbytes: int | None) -> float:
    """Bytes in MiB, as the reports carry them (NaN: not known)."""
    return math.nan if nbytes is None else nbytes / MIB


# --- CUDA: a trial's share of a card -------------------------------------------------------


@dataclass(frozen=True)
class CudaShare:
    """The memory a trial may use on its card, split into what its process holds outside
    PyTorch's allocator and what is left for the allocator (the tensors)."""

    total_bytes: int  # the card
    allowed_bytes: int  # the trial's share in all: gpu share x card, or a stricter budget
    outside_allocator_bytes: int  # context, kernels, library handles: measured
    # what the context grows by after it was measured (the real model's kernels load lazily)
    context_growth_bytes: int = 0

    @property
    def allocator_bytes(self) -> int:
        return self.allowed_bytes - self.outside_allocator_bytes - self.context_growth_bytes

    @property
    def allocator_fraction(self) -> float:
        """For `torch.cuda.set_per_process_memory_fraction`, which caps the allocator only."""
        return max(self.allocator_bytes, 0) / self.total_bytes


# The context is measured after tiny kernels (`trainables.cuda.load_kernels`); the real
# model's cuDNN engines, cuBLASLt and Triton kernels load later. On an H100 (torch 2.11,
# 2026-11-26: `python bench/gpu.py --parts card`) that added 4 MiB after a ResNet-50 step,
# 6 with AMP, channels-last and the autotuner, 10 after a compiled step: kept aside, thrice.
CONTEXT_GROWTH_BYTES = 32 * MIB


def cuda_share(
    total_bytes: int,
    gpu_share: float | None,
    budget_mb: float | None,
    outside_allocator_bytes: int,
    context_growth_bytes: int = CONTEXT_GROWTH_BYTES,
) -> CudaShare:
    """A trial on a quarter of a card keeps to a quarter of its memory (Ray gives no memory
    isolation), context included, and what it grows by later: four quarter-shares then fit
    the card together. A budget stricter than the share acts like a card of that size."""
    allowed = float(total_bytes)
    if gpu_share is not None and 0 < gpu_share < 1:
        allowed *= gpu_share
    if budget_mb is not None:
        allowed = min(allowed, budget_mb * MIB)
    return CudaShare(total_bytes, int(allowed), outside_allocator_bytes, context_growth_bytes)


def card_was_full(
    share: CudaShare, free_bytes: int, reserved_bytes: int, requested_bytes: int | None
) -> bool:
    """Whether an out-of-memory error came from the card, not from the trial's own share.

    Only when the trial's own limit would have granted the allocation (what it holds plus
    what it asked for stays within its allocator share) and the card did not have that
    much free did neighbours (or another program) cause it. Without the requested size, or
    on a card the trial has to itself, the OOM is the trial's own: the searcher may learn
    from it.
    """
    if requested_bytes is None or share.allowed_bytes >= share.total_bytes:
        return False
    within_share = reserved_bytes + requested_bytes <= share.allocator_bytes
    return within_share and free_bytes < requested_bytes


_REQUEST = re.compile(r"tried to allocate ([\d.]+) ?([KMGT]i?B)", re.IGNORECASE)
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def requested_bytes(message: str) -> int | None:
    """The allocation an out-of-memory message says failed ("Tried to allocate 2.00 GiB")."""
    match = _REQUEST.search(message)
    if match is None:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)[0].upper()])


# --- the budget: one place decides whether a step fits and holds the trial to it -------------


class MemoryBudget:
    """A trial's memory limit on its device, and every question about it.

    On CUDA the allocator enforces it: the trial's share of the card (`gpu_share`, or a
    stricter `budget_mb`), less what its process holds outside the allocator, becomes the
    allocator's limit, so a step that needs more raises CUDA's own out-of-memory error. On
    CPU the meter enforces it: a step whose metered peak exceeds `budget_mb` raises
    `MemoryBudgetExceeded` before it allocates, as a card of that size would.

    `device` may be `torch.device("cuda")`: the card is its current device, with its index.
    `card` is the card to hold the trial to; by default the device's, none on a CPU.
    """

    def __init__(
        self,
        device: torch.device,
        budget_mb: float | None = None,
        gpu_share: float | None = None,
        card: TorchCudaCard | None = None,
    ) -> None:
        self.device = indexed(device)
        self.budget_bytes = None if budget_mb is None else int(budget_mb * MIB)
        if card is None and self.device.type == "cuda":
            card = TorchCudaCard(self.device)
        self.card = card
        self.share: CudaShare | None = None
        self._metered: dict[tuple[int, ...], int] = {}  # CPU meter's peak by batch shape
        self._refusals_before = 0  # the allocator's refusals when the peak was last reset
        if self.card is not None:
            outside = self.card.outside_allocator_bytes()  # once per process
            if self.card.reserved_bytes() > 0:
                # A reused worker's cache (the last trial's blocks): counted in this trial's
                # reserved peak, it would pass for this trial's memory. Not after every
                # trial's start: only when there is something cached.
                self.card.release_cached()
            self.share = cuda_share(self.card.total_bytes(), gpu_share, budget_mb, outside)
            # Always set: a reused worker process must not keep the previous trial's limit.
            self.card.set_allocator_fraction(self.share.allocator_fraction)
            self._refusals_before = self.card.allocation_failures()
            if self.share.allocator_bytes <= 0:
                raise torch.OutOfMemoryError(
                    f"a share of {self.share.allowed_bytes / MIB:.0f} MiB cannot hold this "
                    f"process's CUDA context and libraries "
                    f"({self.share.outside_allocator_bytes / MIB:.0f} MiB)"
                )

    def card_figures(self) -> dict[str, float]:
        """The card's memory and what the process holds outside its allocator (MiB), as the
        reports carry them (`card_mb`, `card_context_mb`); NaN on CPU."""
        if self.share is None:
            return {"card_mb": math.nan, "card_context_mb": math.nan}
        outside = self.share.outside_allocator_bytes + self.share.context_growth_bytes
        return {"card_mb": self.share.total_bytes / MIB, "card_context_mb": outside / MIB}

    @property
    def memory_device(self) -> torch.device:
        """The device whose memory this budget holds: its card's, else its own."""
        return self.card.device if self.card is not None else self.device

    @property
    def limit_bytes(self) -> int | None:
        """What the trial's steps may reserve: the allocator's limit on a card, the budget
        on CPU (None: no limit known)."""
        if self.share is not None:
            return self.share.allocator_bytes
        return self.budget_bytes

    def enforce(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        precision: Precision,
    ) -> int:
        """Before a step on `inputs`: on CPU the metered peak (bytes), raising
        `MemoryBudgetExceeded` when over the budget; on CUDA 0 (the allocator enforces)."""
        if self.card is not None:
            return 0
        peak = self._metered_peak(model, optimizer, inputs, targets, precision)
        if not self.allows(peak):
            raise MemoryBudgetExceeded(
                f"a training step of {len(inputs)} images needs {peak / MIB:.0f} MiB, "
                f"over the budget of {self.budget_bytes / MIB:.0f} MiB",
                needed_mb=peak / MIB,
            )
        return peak

    def fits(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        make_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
        precision: Precision,
    ) -> bool:
        """Whether a training step on the batch `make_batch()` puts on the device fits,
        measured in training mode (where checkpointing acts): on CPU by the meter, on CUDA
        by running the step with the update left out (weights, batch-norm statistics and
        gradients as they were). A batch that does not fit on the device itself: no."""
        return self.step_peak(model, optimizer, make_batch, precision) is not None

    def step_peak(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        make_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
        precision: Precision,
        fresh: bool = False,
    ) -> StepPeak | None:
        """The peak of a training step on `make_batch()` with the update left out, or None
        where it does not fit (see `fits`). On CUDA the cache is given back only after an
        out-of-memory error (probing costs no more than the steps it runs), or before the
        step where `fresh`: its reserved peak is then what a trial's first step reserves."""
        was_training = model.training
        model.train()
        peak: StepPeak | None = None
        try:
            inputs, targets = make_batch()
            if self.card is None:
                metered = self._metered_peak(model, optimizer, inputs, targets, precision)
                peak = StepPeak(metered, metered) if self.allows(metered) else None
            else:
                if fresh:
                    self.card.release_cached()
                self.reset_peak()
                dry_step(model, optimizer, (inputs, targets), precision)
                peak = StepPeak(self.card.peak_bytes(), self.card.peak_reserved_bytes())
        except Exception as error:
            if not is_out_of_memory(error, self.allocator_refused):
                raise
        finally:
            model.train(was_training)
        inputs = targets = None
        if self.card is not None:  # the failed step's tensors went with the except block
            optimizer.zero_grad(set_to_none=True)
            if peak is None:
                release_memory(self.memory_device)
        return peak

    def _metered_peak(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        precision: Precision,
    ) -> int:
        """The CPU meter's peak for a step on `inputs`. It depends on the batch's shape
        alone (in training mode, where `fits` and the loop measure), so it is measured once
        per shape in a trial, on two tiny batches (`extrapolated_step_peak_bytes`)."""
        shape = tuple(inputs.shape)
        if shape not in self._metered:
            self._metered[shape] = extrapolated_step_peak_bytes(
                model, optimizer, inputs, targets, precision
            )
        return self._metered[shape]

    def allows(self, metered_bytes: float) -> bool:
        """Whether a step the CPU meter puts at `metered_bytes` is within the budget."""
        return self.budget_bytes is None or metered_bytes <= self.budget_bytes

    def reset_peak(self) -> None:
        """Start measuring a step (or an epoch): its peak, and the allocator's refusals."""
        if self.card is not None:
            self.card.reset_peak()
            self._refusals_before = self.card.allocation_failures()

    def allocator_refused(self) -> bool:
        """Whether the card's allocator refused a request since `reset_peak` (or since the
        budget was set): what turns cuDNN's "unable to find an engine" into out of memory
        (`trainables.oom.is_out_of_memory`)."""
        return self.card is not None and self.card.allocation_failures() > self._refusals_before

    def peak(self, metered: int) -> StepPeak:
        """The peak since `reset_peak`: the allocator's on CUDA, else the meter's
        (`metered`, from `enforce`), which stands for both tensors and reserved memory."""
        if self.card is None:
            return StepPeak(metered, metered)
        return StepPeak(self.card.peak_bytes(), self.card.peak_reserved_bytes())

    def explain_oom(self, message: str) -> tuple[str, bool]:
        """After an out-of-memory error with `message`: (a note for the trial's detail,
        whether the card as a whole was full while the trial was inside its share: not the
        config's fault)."""
        if self.card is None or self.share is None:
            return "", False
        free, reserved = self.card.free_bytes(), self.card.reserved_bytes()
        note = (
            f"; the trial held {reserved / MIB:.0f} of its {self.share.allocator_bytes / MIB:.0f} "
            f"MiB for tensors (share {self.share.allowed_bytes / MIB:.0f} MiB, "
            f"{self.share.outside_allocator_bytes / MIB:.0f} MiB outside the allocator and "
            f"{self.share.context_growth_bytes / MIB:.0f} kept for its growth), "
            f"the card had {free / MIB:.0f} MiB free"
        )
        if card_was_full(self.share, free, reserved, requested_bytes(message)):
            return note + ": the card was full, not this trial's share", True
        return note, False


@dataclass(frozen=True)
class StepPeak:
    """The peak of a training step: its live tensors, and what the allocator reserved for
    them (what its limit is checked against). The CPU meter gives one figure for both."""

    allocated_bytes: int
    reserved_bytes: int
