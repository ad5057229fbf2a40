"""The batch a trial evaluates at, chosen by timing, as cuDNN's autotuner chooses kernels.

Scoring forward-only at the training batch is not always fastest. On this project's CPU
(`python bench/eval_batch.py`) the small CNN at 64 px scores 400 images in 0.175 s at
batch 32 and 0.277 s at 64, where its activations no longer stay in cache, while
ResNet-18 takes 1.28 s at 32 and 1.18 s at 64. So a trial scores its first
splits at its physical batch, then half of it, then a quarter, one split each, and keeps the
fastest per image for the rest of the trial. The timed scorings are the epoch's own: the
choice costs nothing but the first scorings at the slower sizes. A size's one timing
includes its one-time set-up (kernel selection, cuDNN's autotuner when on), which favours
the physical batch, already set up by training: the choice errs towards the old default.

Eval-mode scores do not depend on how a split is cut into batches, except for float
rounding in the loss; a trial that must repeat exactly (`deterministic`) keeps its physical
batch. None of the sizes needs more memory than the training step at the physical batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

# Below this the per-call overhead dominates on any device.
MIN_EVAL_BATCH = 8

Scores = TypeVar("Scores")


class EvalBatch:
    """The evaluation batch of one trial: `fixed` when given, else the physical batch when
    not `timed`, else the fastest of the timed candidates (see the module docstring)."""

    def __init__(
        self,
        fixed: int | None = None,
        *,
        timed: bool = True,
        seconds_per_image: dict[int, float] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.fixed = fixed
        self.timed = timed and fixed is None
        self.clock = clock
        # eval batch -> seconds per image (from a checkpoint, or timed here); when AdaBatch
        # grows the physical batch, only its candidates not timed yet are tried
        self.seconds_per_image: dict[int, float] = dict(seconds_per_image or {})

    @staticmethod
    def candidates(physical_batch: int) -> list[int]:
        sizes = (physical_batch, physical_batch // 2, physical_batch // 4)
        usable = [size for size in sizes if size >= MIN_EVAL_BATCH]
        return list(dict.fromkeys(usable)) or [physical_batch]

    def size(self, physical_batch: int) -> int:
        """The batch the next scoring runs at."""
        if self.fixed is not None:
            return self.fixed
        if not self.timed:
            return physical_batch
        candidates = self.candidates(physical_batch)
        timed = self.seconds_per_image
        untried = [size for size in candidates if size not in timed]
        return untried[0] if untried else min(candidates, key=timed.__getitem__)

    def score(self, physical_batch: int, images: int, scoring: Callable[[int], Scores]) -> Scores:
        """`scoring(batch)` of a split of `images` images, at `size(physical_batch)`, timed
        while the candidates are being tried. `scoring` must return only once the device has
        finished (reading its scores as Python numbers does)."""
        size = self.size(physical_batch)
        if not self.timed or size in self.seconds_per_image or images == 0:
            return scoring(size)
        started = self.clock()
        scores = scoring(size)
        self.seconds_per_image[size] = (self.clock() - started) / images
        return scores
