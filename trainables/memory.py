"""Peak memory of a training step: on CUDA the allocator's, on CPU a meter's.

The CPU has no allocator peak that belongs to one trial (the process's RSS also holds the
dataset, Python and torch's caches), so on CPU we count what a step must hold at its peak,
the moment backward starts:

    parameters + gradients + optimizer state + the input batch
    + every tensor autograd saved for backward (each storage once, parameters excluded)

With activation checkpointing the forward keeps only each checkpointed segment's input;
the segment's own activations come back while it is recomputed in backward, so the saved
part is: the segment inputs + the larger of the last segment's saved tensors and the
largest recomputed segment's.

It is an upper bound on the step's live tensors (gradients are counted as if all existed
while every activation is still alive) and ignores the allocator's caching and the
temporaries inside single operators. So it reads lower than what a GPU would need, but it
moves with the physical batch, the autocast dtype (AMP stores bf16 activations and bf16
copies of the weights) and what is saved for backward (checkpointing), as GPU memory does.

The meter runs a separate forward pass on the step's batch (no optimizer step, batch-norm
statistics restored), so measuring never changes what is trained.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from trainables.models import StagedClassifier
from trainables.oom import is_out_of_memory, release_memory
from trainables.precision import Precision

MIB = 1024 * 1024


def _storage_key(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def unique_storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views share one storage)."""
    return sum(nbytes for _, nbytes in {_storage_key(t) for t in tensors})


@dataclass
class SavedTensorsMeter:
    """Records the storages autograd saves for backward while `recording()` is active."""

    exclude: set[tuple[int, int]] = field(default_factory=set)  # e.g. the parameters
    saved: dict[tuple[int, int], int] = field(default_factory=dict)

    @contextmanager
    def recording(self) -> Iterator[SavedTensorsMeter]:
        def pack(tensor: torch.Tensor) -> torch.Tensor:
            key = _storage_key(tensor)
            if key not in self.exclude:
                self.saved[key] = key[1]
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield self

    @property
    def saved_bytes(self) -> int:
        return sum(self.saved.values())


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


@contextmanager
def _buffers_restored(model: nn.Module) -> Iterator[None]:
    """Batch-norm running statistics as they were: a measuring pass must not train."""
    saved = {name: buffer.clone() for name, buffer in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(saved[name])


def _saved_bytes(
    module: nn.Module, inputs: torch.Tensor, targets: torch.Tensor | None, precision: Precision,
    exclude: set[tuple[int, int]],
) -> tuple[int, torch.Tensor]:  # fmt: skip
    """Bytes `module` saves for backward on `inputs` (with the loss when `targets` is given)."""
    meter = SavedTensorsMeter(exclude=exclude)
    with meter.recording(), precision.autocast():
        outputs = module(inputs)
        if targets is not None:
            F.cross_entropy(outputs, targets)
    return meter.saved_bytes, outputs.detach()


def activation_bytes(
    model: StagedClassifier, inputs: torch.Tensor, targets: torch.Tensor, precision: Precision
) -> int:
    """What one training step keeps for backward at its peak (see the module docstring)."""
    # Parameters and the batch are counted once, by `step_peak_bytes`.
    exclude = {_storage_key(p) for p in model.parameters()} | {_storage_key(inputs)}
    with _buffers_restored(model), torch.enable_grad():
        if not model.checkpointing:
            return _saved_bytes(model, inputs, targets, precision, exclude)[0]
        *recomputed, last = model.segments()
        kept, largest, x = 0, 0, inputs
        for segment in recomputed:
            saved, x = _saved_bytes(segment, x, None, precision, exclude)
            largest = max(largest, saved)
            kept += unique_storage_bytes([x])  # the next segment's input stays alive
        last_saved, _ = _saved_bytes(last, x, targets, precision, exclude)
        return kept + max(last_saved, largest)


def step_peak_bytes(
    model: StagedClassifier,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    precision: Precision,
) -> int:
    """The CPU meter's peak for one training step on `inputs`."""
    params = [p for p in model.parameters() if p.requires_grad]
    param_bytes = unique_storage_bytes(params)
    return (
        2 * param_bytes  # the parameters and their gradients
        + optimizer_state_bytes(optimizer)
        + unique_storage_bytes([inputs])
        + activation_bytes(model, inputs, targets, precision)
    )


def reset_cuda_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def cuda_peak_bytes(device: torch.device) -> int:
    return int(torch.cuda.max_memory_allocated(device))


def cuda_memory_fraction(
    gpu_share: float | None, budget_mb: float | None, total_mb: float
) -> float | None:
    """The share of the card's memory a trial is held to: its GPU share (Ray gives no
    memory isolation, so a trial on a quarter of a card keeps to a quarter of its memory),
    or a stricter budget. None: the whole card."""
    limits = []
    if gpu_share is not None and 0 < gpu_share < 1:
        limits.append(gpu_share)
    if budget_mb is not None:
        limits.append(min(1.0, budget_mb / total_mb))
    return min(limits) if limits else None


def limit_cuda_memory(
    device: torch.device, gpu_share: float | None, budget_mb: float | None
) -> None:
    if device.type != "cuda":
        return
    total_mb = torch.cuda.get_device_properties(device).total_memory / MIB
    fraction = cuda_memory_fraction(gpu_share, budget_mb, total_mb)
    # Always set: a reused worker process must not keep the previous trial's limit.
    torch.cuda.set_per_process_memory_fraction(fraction or 1.0, device)


def fits_in_memory(
    model: StagedClassifier,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    precision: Precision,
    budget_bytes: int | None,
) -> bool:
    """Whether a training step on `inputs` fits: on CPU under the meter's budget, on CUDA
    by running its forward and backward (gradients discarded, statistics restored)."""
    if inputs.device.type != "cuda":
        peak = step_peak_bytes(model, optimizer, inputs, targets, precision)
        return budget_bytes is None or peak <= budget_bytes
    fits = True
    try:
        with _buffers_restored(model), precision.autocast():
            loss = F.cross_entropy(model(inputs), targets)
            precision.backward(loss)
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        fits = False
    optimizer.zero_grad(set_to_none=True)
    release_memory()
    return fits
