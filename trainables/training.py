"""One training loop and one evaluation, over image tensors that already sit on the device.

Every technique is a switch of this one loop: the physical batch and accumulation steps
come from the epoch's plan (AdaBatch), the learning rate per optimizer step from `lr_at`
(warmup), precision from `Precision` (AMP), checkpointing lives in the model, and
augmentation is one call on the batch. No DataLoader in the hot loop: a batch is an index
into the split, and normalisation is one fused op on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainables.augment import random_crop_flip
from trainables.memory import MIB, cuda_peak_bytes, reset_cuda_peak, step_peak_bytes
from trainables.models import StagedClassifier
from trainables.oom import MemoryBudgetExceeded
from trainables.precision import Precision
from trainables.schedules import EpochPlan


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
    train_loss: float  # nan or inf when training diverged
    train_acc: float
    images: int  # images trained on
    optimizer_steps: int
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


def step_groups(count: int, batch_size: int, accumulation_steps: int) -> list[list[slice]]:
    """Micro-batches grouped into optimizer steps. A partial last group is kept: its step
    averages over the images it has, never silently dropped."""
    slices = batch_slices(count, batch_size)
    return [slices[i : i + accumulation_steps] for i in range(0, len(slices), accumulation_steps)]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_epoch(
    model: StagedClassifier,
    optimizer: torch.optim.Optimizer,
    split: DeviceSplit,
    normalise: Normaliser,
    *,
    plan: EpochPlan,
    precision: Precision,
    generator: torch.Generator,
    augment: bool = False,
    lr_at: Callable[[float], float] | None = None,
    memory_budget_bytes: int | None = None,
) -> EpochResult:
    """One pass over `split` in the order `generator` draws.

    Each optimizer step averages the loss over the images of its micro-batches (weighted
    by their sizes), so k micro-batches of b give the update of one batch of k*b.
    `lr_at(fraction of the epoch done)` sets the learning rate before every step.
    On CPU, a step the meter finds above `memory_budget_bytes` raises the out-of-memory
    error a GPU of that size would.
    """
    device = split.images.device
    model.train()
    order = torch.randperm(len(split), generator=generator).to(device)
    groups = step_groups(len(split), plan.batch_size, plan.accumulation_steps)
    peak_bytes = 0
    if device.type != "cuda":  # the CPU meter, on the epoch's first batch, outside the clock
        first = order[groups[0][0]]
        peak_bytes = step_peak_bytes(
            model, optimizer, normalise(split.images[first]), split.labels[first], precision
        )
        if memory_budget_bytes is not None and peak_bytes > memory_budget_bytes:
            raise MemoryBudgetExceeded(
                f"a training step of {plan.batch_size} images needs {peak_bytes / MIB:.0f} MiB, "
                f"over the budget of {memory_budget_bytes / MIB:.0f} MiB",
                needed_mb=peak_bytes / MIB,
            )
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    images_seen = 0
    reset_cuda_peak(device)
    _synchronize(device)
    started = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    for step, group in enumerate(groups):
        if lr_at is not None:
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr_at(step / len(groups))
        group_images = sum(batch.stop - batch.start for batch in group)
        for batch in group:
            indices = order[batch]
            pixels = split.images[indices]
            if augment:
                pixels = random_crop_flip(pixels, generator)
            targets = split.labels[indices]
            with precision.autocast():
                logits = model(normalise(pixels))
                loss = F.cross_entropy(logits, targets)
            precision.backward(loss * (len(targets) / group_images))
            loss_sum += loss.detach().float() * len(targets)
            correct += (logits.detach().argmax(dim=1) == targets).sum()
            images_seen += len(targets)
        precision.step(optimizer)
        optimizer.zero_grad(set_to_none=True)
    _synchronize(device)
    seconds = time.perf_counter() - started
    if device.type == "cuda":
        peak_bytes = cuda_peak_bytes(device)
    return EpochResult(
        train_loss=float(loss_sum) / images_seen,
        train_acc=float(correct) / images_seen,
        images=images_seen,
        optimizer_steps=len(groups),
        seconds=seconds,
        peak_mem_bytes=peak_bytes,
    )


@torch.no_grad()
def evaluate(
    model: nn.Module,
    split: DeviceSplit,
    normalise: Normaliser,
    *,
    batch_size: int,
    precision: Precision | None = None,
) -> tuple[float, float]:
    """(accuracy, mean loss) of `model` on `split` in eval mode."""
    model.eval()
    loss_sum = torch.zeros((), device=split.images.device)
    correct = torch.zeros((), device=split.images.device, dtype=torch.long)
    for start in range(0, len(split), batch_size):
        targets = split.labels[start : start + batch_size]
        with precision.autocast() if precision else nullcontext():
            logits = model(normalise(split.images[start : start + batch_size]))
        loss_sum += F.cross_entropy(logits.float(), targets, reduction="sum")
        correct += (logits.argmax(dim=1) == targets).sum()
    return float(correct) / len(split), float(loss_sum) / len(split)
