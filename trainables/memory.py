"""Peak memory of a training step, on CUDA from the allocator and on CPU from a meter.

The CPU has no allocator peak that belongs to one trial (the process's RSS also holds the
dataset, Python and torch's caches), so on CPU we count what a step must hold at its peak,
the moment backward starts:

    parameters + gradients + optimizer state + the input batch
    + every tensor autograd saved for backward (deduplicated by storage)

Tensors are counted by the bytes of their storage, each storage once, and parameters that
autograd saves are not counted twice. It is an upper bound on the step's live tensors:
gradients are counted as if all were allocated while every activation is still alive.
It ignores the allocator's caching and fragmentation and the temporaries of a single
operator, so it is lower than what a GPU would need, but it moves with batch size, dtype
(AMP) and what is saved for backward (checkpointing) the way GPU memory does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

MIB = 1024 * 1024


def _storage_key(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def unique_storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views share one storage)."""
    return sum(nbytes for _, nbytes in {_storage_key(t) for t in tensors})


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.numel() > 1:  # skip step counters
                yield value


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


def step_peak_bytes(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: torch.Tensor,
    saved_bytes: int,
) -> int:
    """The CPU meter's peak for one step, from what the step saved for backward."""
    params = list(model.parameters())
    # A gradient has the parameter's size whether or not it exists yet at measuring time.
    grad_bytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    return (
        unique_storage_bytes(params)
        + grad_bytes
        + unique_storage_bytes(optimizer_state_tensors(optimizer))
        + unique_storage_bytes([batch])
        + saved_bytes
    )


def parameter_storages(model: torch.nn.Module) -> set[tuple[int, int]]:
    return {_storage_key(p) for p in model.parameters()}


def reset_cuda_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def cuda_peak_bytes(device: torch.device) -> int:
    return int(torch.cuda.max_memory_allocated(device))
