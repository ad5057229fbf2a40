"""One training loop and one evaluation, over image tensors that already sit on the device.

No DataLoader in the hot loop: the whole split is a uint8 tensor on the device, a batch is
an index into it, and normalisation is one fused op on the batch.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainables.memory import (
    SavedTensorsMeter,
    cuda_peak_bytes,
    parameter_storages,
    reset_cuda_peak,
    step_peak_bytes,
)


@dataclass(frozen=True)
class DeviceSplit:
    """A split on the device: uint8 images (N, 3, H, W) and int64 labels (N,)."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, indices: torch.Tensor) -> DeviceSplit:
        return DeviceSplit(self.images[indices], self.labels[indices])


@dataclass(frozen=True)
class Normaliser:
    """uint8 -> float, (x / 255 - mean) / std per channel, as one multiply-add."""

    scale: torch.Tensor  # (1, 3, 1, 1)
    shift: torch.Tensor  # (1, 3, 1, 1)

    @classmethod
    def from_stats(
        cls, mean: tuple[float, ...], std: tuple[float, ...], device: torch.device
    ) -> Normaliser:
        mean_t = torch.tensor(mean, device=device).view(1, -1, 1, 1)
        std_t = torch.tensor(std, device=device).view(1, -1, 1, 1)
        return cls(scale=1.0 / (255.0 * std_t), shift=-mean_t / std_t)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.shift, images.float(), self.scale)


@dataclass(frozen=True)
class EpochResult:
    train_loss: float
    train_acc: float
    images: int  # images trained on
    seconds: float  # wall time of the training part
    peak_mem_bytes: int


def batch_slices(count: int, batch_size: int) -> list[slice]:
    """Consecutive batches covering `count` items; the last may be partial.

    A last batch of a single image is left out: BatchNorm cannot train on one image.
    """
    slices = [slice(start, min(start + batch_size, count)) for start in range(0, count, batch_size)]
    if len(slices) > 1 and slices[-1].stop - slices[-1].start == 1:
        slices.pop()
    return slices


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    split: DeviceSplit,
    normalise: Normaliser,
    *,
    batch_size: int,
    generator: torch.Generator,
) -> EpochResult:
    """One pass over `split` in the order `generator` draws; the first step is metered."""
    device = split.images.device
    model.train()
    order = torch.randperm(len(split), generator=generator).to(device)
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    images_seen = 0
    peak_bytes = 0
    reset_cuda_peak(device)
    _synchronize(device)
    started = time.perf_counter()
    for step, batch in enumerate(batch_slices(len(split), batch_size)):
        indices = order[batch]
        inputs = normalise(split.images[indices])
        targets = split.labels[indices]
        optimizer.zero_grad(set_to_none=True)
        # CUDA has the allocator's peak; on CPU the first step of the epoch is metered.
        meter = (
            SavedTensorsMeter(exclude=parameter_storages(model))
            if step == 0 and device.type != "cuda"
            else None
        )
        with meter.recording() if meter else nullcontext():
            logits = model(inputs)
            loss = F.cross_entropy(logits, targets)
        loss.backward()
        optimizer.step()
        if meter is not None:
            # Measured after the step so that optimizer state created by it is counted.
            peak_bytes = step_peak_bytes(model, optimizer, inputs, meter.saved_bytes)
        loss_sum += loss.detach() * len(targets)
        correct += (logits.detach().argmax(dim=1) == targets).sum()
        images_seen += len(targets)
    _synchronize(device)
    seconds = time.perf_counter() - started
    if device.type == "cuda":
        peak_bytes = cuda_peak_bytes(device)
    return EpochResult(
        train_loss=float(loss_sum) / images_seen,
        train_acc=float(correct) / images_seen,
        images=images_seen,
        seconds=seconds,
        peak_mem_bytes=peak_bytes,
    )


@torch.no_grad()
def evaluate(
    model: nn.Module, split: DeviceSplit, normalise: Normaliser, *, batch_size: int
) -> tuple[float, float]:
    """(accuracy, mean loss) of `model` on `split` in eval mode."""
    model.eval()
    loss_sum = torch.zeros((), device=split.images.device)
    correct = torch.zeros((), device=split.images.device, dtype=torch.long)
    for start in range(0, len(split), batch_size):
        logits = model(normalise(split.images[start : start + batch_size]))
        targets = split.labels[start : start + batch_size]
        loss_sum += F.cross_entropy(logits, targets, reduction="sum")
        correct += (logits.argmax(dim=1) == targets).sum()
    return float(correct) / len(split), float(loss_sum) / len(split)
