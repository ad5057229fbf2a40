"""Batch-size and learning-rate schedules: pure functions of (epoch, settings).

AdaBatch (Devarakonda, Naumov & Garland 2017) grows the effective batch by a factor beta
every `interval` epochs. Their rule for the learning rate: an epoch with lr alpha and batch
r updates the weights like one with lr beta*alpha and batch beta*r, so growing the batch
while keeping lr / batch constant leaves the training dynamics alone, and growing it
without raising lr acts as a learning-rate decay of 1/beta. Their experiments add a decay
on top: CIFAR-100 doubles the batch and halves lr every 20 epochs (lr / batch x 0.25 per
growth); ImageNet doubles it with lr x 0.2 (lr / batch x 0.1, the fixed-batch baseline's
decay). Here `lr_decay` is that factor on lr / effective batch per growth: 1 keeps the
ratio constant (lr grows with the batch), 0.25 is their CIFAR schedule, 0.1 ImageNet's.

The effective batch never passes the training split, as in the reference implementation
(NVlabs/AdaBatch): where the schedule asks for more, accumulation is cut to
floor(split / micro-batch) (the micro-batch itself to the split, if it is larger), and lr
is multiplied by the batch achieved over the batch asked, so lr follows the batch used.

Beside the paper's fixed interval, the batch can grow when the gradients ask for it
(`grows_by_noise`): once the measured gradient noise scale (McCandlish et al. 2018, see
`trainables.noise_scale`) has reached the next batch size, a larger batch still takes
nearly as few steps per unit of progress as a small one, so growing costs no accuracy per
step and buys speed.

Gradual warmup (Goyal et al. 2017) ramps lr linearly from `start_factor * lr` to lr over
the first epochs, per optimizer step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EpochSchedule:
    batch_size: int  # physical micro-batch on the device
    accumulation_steps: int  # micro-batches per optimizer step
    lr: float  # learning rate of the epoch, before warmup
    growths: int  # how many times the batch has grown so far
    asked_batch_size: int | None = None  # the schedule's effective batch; None: as used

    @property
    def effective_batch_size(self) -> int:
        return self.batch_size * self.accumulation_steps

    @property
    def scheduled_batch_size(self) -> int:
        """The effective batch the schedule asked for: more than `effective_batch_size`
        where the training split capped it."""
        return self.asked_batch_size or self.effective_batch_size


def growths_by(epoch: int, growth: int, interval: int) -> int:
    """Growths that happened before `epoch` (1-based): one at the start of every interval."""
    return (epoch - 1) // interval if growth > 1 else 0


def epoch_schedule(
    epoch: int,
    *,
    batch_size: int,
    accumulation_steps: int,
    lr: float,
    growth: int = 1,
    interval: int = 1,
    lr_decay: float = 1.0,
    capacity: int | None = None,
    train_size: int | None = None,
    growths: int | None = None,
) -> EpochSchedule:
    """Batch, accumulation and lr for `epoch` under AdaBatch growth.

    The physical batch grows with the effective one until it would exceed `capacity` (the
    largest batch allowed or known to fit); from there the growth is carried by more
    accumulation steps, so the effective batch keeps following the schedule, up to the
    `train_size` images of the training split (see the module docstring). `growths`, when
    given, is how many times the batch has grown (a rule other than the fixed interval).
    """
    if growths is None:
        growths = growths_by(epoch, growth, interval)
    scale = growth**growths
    physical = batch_size * scale
    asked = physical * accumulation_steps
    steps = accumulation_steps
    lr_now = lr * scale * lr_decay**growths
    if capacity is not None and physical > capacity:
        steps = math.ceil(asked / capacity)
        physical = math.ceil(asked / steps)
    if train_size is not None and physical * steps > train_size:
        physical = min(physical, train_size)
        steps = train_size // physical
        lr_now *= physical * steps / asked
    return EpochSchedule(
        batch_size=physical,
        accumulation_steps=steps,
        lr=lr_now,
        growths=growths,
        asked_batch_size=asked,
    )


def grows_by_noise(
    noise_scale: float, effective_batch_size: int, growth: int, train_size: int
) -> bool:
    """Whether the batch grows for the next epoch under the noise-scale rule: the measured
    noise scale has reached the next batch, which still fits in the training split. A noise
    scale not measured (NaN) keeps the batch; one beyond measure (inf) grows it."""
    following = effective_batch_size * growth
    return growth > 1 and following <= train_size and noise_scale >= following


def warmup_factor(progress_epochs: float, warmup_epochs: int, start_factor: float) -> float:
    """Multiplier on lr after `progress_epochs` of training (fractional, from 0)."""
    if warmup_epochs <= 0 or progress_epochs >= warmup_epochs:
        return 1.0
    return start_factor + (1.0 - start_factor) * progress_epochs / warmup_epochs
