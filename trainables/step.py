"""One training step: the forward, backward and update that every part of a trial runs.

The epoch loop trains with it; the AdaBatch memory probe, the capacity prober and the
compile of a new batch shape run it without the update (`dry_step`), so what is measured
and compiled is exactly what is trained.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainables.noise_scale import NoiseMeter
from trainables.precision import Precision


@dataclass(frozen=True)
class StepOutcome:
    loss_sum: torch.Tensor  # summed over images, on the device: reading it waits for it
    correct: torch.Tensor  # images classified right, on the device
    images: int
    updated: bool  # False: a step that trains nothing (update=False)
    # with a GradScaler, a 0-dim tensor on the device: true where the step was skipped
    # (its gradients overflowed); None: it could not be skipped
    skipped: torch.Tensor | None = None


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    precision: Precision,
    *,
    images: int,
    update: bool = True,
    noise: NoiseMeter | None = None,
) -> StepOutcome:
    """One optimizer step over `micro_batches` of (inputs, targets) already on the device.

    Each micro-batch's loss is weighted by its share of the step's `images`, so k
    micro-batches of b give the update of one batch of k*b. With `update=False` the
    gradients are computed and dropped: the step's memory without changing the weights.
    The gradients are released at the end either way. With `noise`, the step's gradient
    norms go to the gradient-noise-scale meter (which needs two or more micro-batches).
    """
    device = next(model.parameters()).device
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    seen = 0
    with noise.measuring() if noise else nullcontext():
        for inputs, targets in micro_batches:
            with precision.autocast():
                logits = model(inputs)
                loss = F.cross_entropy(logits, targets)
            weight = len(targets) / images
            if noise:
                noise.micro_batch_started()
            precision.backward(loss * weight)
            if noise:
                noise.micro_batch_done(len(targets), weight)
            loss_sum += loss.detach().float() * len(targets)
            correct += (logits.detach().argmax(dim=1) == targets).sum()
            seen += len(targets)
        if noise:
            noise.step_done(precision.loss_scale())
    skipped = precision.step(optimizer, model.parameters()) if update else None
    optimizer.zero_grad(set_to_none=True)
    return StepOutcome(loss_sum, correct, seen, updated=update, skipped=skipped)


@contextmanager
def statistics_kept(model: nn.Module) -> Iterator[None]:
    """Batch-norm running statistics (every buffer) as they were: a pass that measures or
    compiles must not train."""
    saved = {name: buffer.clone() for name, buffer in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(saved[name])


def dry_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor],
    precision: Precision,
) -> None:
    """A training step on `batch` (inputs, targets on the device) that changes nothing:
    training mode, the update left out, gradients dropped, batch-norm statistics kept. What
    the memory probes measure and what compiles a new batch shape ahead of its epoch."""
    was_training = model.training
    model.train()
    try:
        with statistics_kept(model):
            train_step(model, optimizer, [batch], precision, images=len(batch[1]), update=False)
    finally:
        model.train(was_training)
