"""The gradient noise scale of a trial, measured from the micro-batches it trains on anyway.

McCandlish, Kaplan, Amodei et al. 2018 ("An Empirical Model of Large-Batch Training"):
B_simple = tr(Σ) / |G|², the per-example gradient covariance's trace over the squared norm
of the true gradient, predicts the batch beyond which a larger batch stops paying off in
steps, and it grows as the loss falls, which is why growing the batch (AdaBatch) works.

Their appendix A estimates both from the gradient norms at two batch sizes: with |G_b|²
the squared norm of a gradient over b examples, E|G_b|² = |G|² + tr(Σ) / b, so two sizes
b < B give unbiased estimates

    |G|²  ≈ (B |G_B|² - b |G_b|²) / (B - b)
    tr(Σ) ≈ (|G_b|² - |G_B|²) / (1/b - 1/B)

each of which is averaged over many steps before dividing (a ratio of noisy estimates
would be biased). An accumulated step gives both sizes as it trains: its micro-batches are
the small ones, the step the big one; but the hooks below cost an epoch of the small CNN
measured whole 5-12% on a CPU (docs/RESULTS.md, section 60), so a few steps are measured
(`trainables.training.with_noise_splits`) and the config's timed speed leaves them out. A
step without accumulation is measured by training it as two halves (two micro-batches of
the same images: the same update, except that BatchNorm normalises each half on its own).

The micro-batch gradients are read by a hook on each parameter, which sees the gradient of
one backward before it is added into `.grad`: no copy of the gradients is held.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn


def spread_steps(steps: int, count: int) -> list[int]:
    """`count` step indices spread evenly over an epoch of `steps` (all, if fewer)."""
    if count >= steps:
        return list(range(steps))
    return sorted({int((i + 0.5) * steps / count) for i in range(count)})


def in_halves(batch: slice) -> list[slice]:
    """A batch as two micro-batches; one too small for two BatchNorm halves stays whole."""
    size = batch.stop - batch.start
    if size < 4:
        return [batch]
    middle = batch.start + size // 2
    return [slice(batch.start, middle), slice(middle, batch.stop)]


def unbiased_estimates(
    small_sq: float, big_sq: float, small: float, big: float
) -> tuple[float, float]:
    """(|G|², tr(Σ)) from the mean squared gradient norms at batch sizes small < big."""
    gradient_sq = (big * big_sq - small * small_sq) / (big - small)
    noise_trace = (small_sq - big_sq) / (1 / small - 1 / big)
    return gradient_sq, noise_trace


@dataclass(frozen=True)
class NoiseScale:
    """Sums of the per-step estimates over the steps measured (one epoch)."""

    gradient_sq: float = 0.0  # of |G|² estimates
    noise_trace: float = 0.0  # of tr(Σ) estimates
    steps: int = 0

    @property
    def value(self) -> float:
        """B_simple: NaN when nothing was measured, inf when the gradient's signal is lost
        in its noise at the batch sizes measured (|G|² estimated at or below zero)."""
        if self.steps == 0:
            return math.nan
        if self.gradient_sq <= 0:
            return math.inf
        return max(0.0, self.noise_trace / self.gradient_sq)


class NoiseMeter:
    """Collects the squared gradient norms of the steps it is told to measure.

    `train_step` measures a step inside `measuring()`, calling `micro_batch_started`
    before each backward, `micro_batch_done` after it and `step_done` before the update;
    nothing waits for the device until `result` is read at the end of the epoch.
    """

    def __init__(self, model: nn.Module) -> None:
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._device = self._params[0].device
        self._micro_sq = torch.zeros((), device=self._device)
        self._small_sq: list[torch.Tensor] = []
        self._sizes: list[int] = []
        self._steps: list[tuple[torch.Tensor, torch.Tensor, float, int]] = []

    def _on_gradient(self, grad: torch.Tensor) -> None:
        self._micro_sq += grad.detach().float().pow(2).sum()

    @contextmanager
    def measuring(self) -> Iterator[None]:
        """The hooks are on the parameters only while a measured step runs."""
        self._small_sq, self._sizes = [], []
        handles = [p.register_hook(self._on_gradient) for p in self._params]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def micro_batch_started(self) -> None:
        self._micro_sq = torch.zeros((), device=self._device)

    def micro_batch_done(self, images: int, weight: float) -> None:
        """`weight`: what the micro-batch's mean loss was multiplied by before backward."""
        self._small_sq.append(self._micro_sq / weight**2)
        self._sizes.append(images)

    def step_done(self, loss_scale: float) -> None:
        """Called with the gradients of the whole step in `.grad` (times `loss_scale`)."""
        if len(self._sizes) < 2:
            return  # a step of one micro-batch has one batch size, and two are needed
        grads = [p.grad for p in self._params if p.grad is not None]
        big_sq = torch.nn.utils.get_total_norm(grads, norm_type=2.0).float() ** 2
        scale_sq = loss_scale**2
        small_sq = torch.stack(self._small_sq).mean() / scale_sq
        # E|g_i|² = |G|² + tr(Σ)/b_i, so the mean over micro-batches of unequal sizes is
        # that of one size: their harmonic mean. The step's gradient is the mean over all.
        small = len(self._sizes) / sum(1 / size for size in self._sizes)
        self._steps.append((small_sq, big_sq / scale_sq, small, sum(self._sizes)))

    def result(self) -> NoiseScale:
        """The epoch's sums; steps whose gradients overflowed (fp16) are left out."""
        total = NoiseScale()
        if not self._steps:
            return total
        norms = torch.stack([torch.stack([s, b]) for s, b, _, _ in self._steps]).tolist()
        for (small_sq, big_sq), (_, _, small, big) in zip(norms, self._steps, strict=True):
            if not (math.isfinite(small_sq) and math.isfinite(big_sq)):
                continue
            gradient_sq, noise_trace = unbiased_estimates(small_sq, big_sq, small, big)
            total = NoiseScale(
                total.gradient_sq + gradient_sq, total.noise_trace + noise_trace, total.steps + 1
            )
        return total
