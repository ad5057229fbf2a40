"""The batch and memory layout a trial evaluates in, chosen by timing, as cuDNN's
autotuner chooses kernels.

Scoring forward-only at the training batch, in the training layout, is not always fastest.
On this project's CPU (`python bench/eval_batch.py`) the small CNN at 64 px scores 400
images in 0.175 s at batch 32 and 0.277 s at 64, where its activations no longer stay in
cache, while ResNet-18 takes 1.28 s at 32 and 1.18 s at 64. And the small CNN at 32 px
scores 2.5x faster in channels-last than in the contiguous layout it trains in by default
(its max-pool has a vectorised kernel only for channels-last on the CPU). So a trial
scores its first splits at its physical batch in its own layout, then in the other layout,
then at half and a quarter of the batch in whichever layout was faster, one split each,
and keeps the fastest per image for the rest of the trial. The timed scorings are the
epoch's own: the choice costs nothing but the first scorings in the slower ways. A way's
one timing includes its one-time set-up (kernel selection, cuDNN's autotuner when on),
which favours the physical batch in the trial's layout, already set up by training: the
choice errs towards the old default.

Eval-mode scores do not depend on how a split is cut into batches or laid out in memory,
except for float rounding in the loss; a trial that must repeat exactly (`deterministic`)
keeps its physical batch and layout. None of the ways needs more memory than the training
step at the physical batch: the model's weights stay as they are, only the batches change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypeVar

# Below this the per-call overhead dominates on any device.
MIN_EVAL_BATCH = 8
# the two layouts, as the run record names them (memory_format): contiguous first
LAYOUTS = ("contiguous", "channels_last")

Scores = TypeVar("Scores")
Way = tuple[int, str]  # (eval batch, layout)


class EvalChoice:
    """How one trial evaluates: at `fixed` batch in its own layout when a batch is given,
    at its physical batch in its own layout when not `timed`, else in the fastest of the
    timed ways (see the module docstring). `own_layout`: the layout the trial trains in."""

    def __init__(
        self,
        fixed: int | None = None,
        *,
        timed: bool = True,
        own_layout: str = "contiguous",
        seconds_per_image: Mapping[Way | int, float] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`seconds_per_image`: the ways timed so far (a resumed trial's); a batch alone is
        one timed in `own_layout`, as trials saved before the layout was chosen kept them."""
        if own_layout not in LAYOUTS:
            raise ValueError(f"own_layout must be one of {LAYOUTS}, not {own_layout!r}")
        self.fixed = fixed
        self.timed = timed and fixed is None
        self.own_layout = own_layout
        self.clock = clock
        # (eval batch, layout) -> seconds per image; when AdaBatch grows the physical batch,
        # only its ways not timed yet are tried
        self.seconds_per_image: dict[Way, float] = {
            (way, own_layout) if isinstance(way, int) else tuple(way): seconds
            for way, seconds in (seconds_per_image or {}).items()
        }

    @property
    def other_layout(self) -> str:
        return next(layout for layout in LAYOUTS if layout != self.own_layout)

    def candidates(self, physical_batch: int) -> list[Way]:
        """The physical batch in the trial's layout and in the other, then its half and its
        quarter (not below `MIN_EVAL_BATCH`) in the faster of those two once both are
        timed (the trial's own until then)."""
        sizes = (physical_batch, physical_batch // 2, physical_batch // 4)
        usable = list(dict.fromkeys(size for size in sizes if size >= MIN_EVAL_BATCH))
        first = usable[0] if usable else physical_batch
        at_physical = [(first, self.own_layout), (first, self.other_layout)]
        timed = self.seconds_per_image
        layout = self.own_layout
        if all(way in timed for way in at_physical):
            layout = min(at_physical, key=timed.__getitem__)[1]
        return at_physical + [(size, layout) for size in usable[1:]]

    def way(self, physical_batch: int) -> Way:
        """The (batch, layout) the next scoring runs in."""
        if self.fixed is not None:
            return self.fixed, self.own_layout
        if not self.timed:
            return physical_batch, self.own_layout
        candidates = self.candidates(physical_batch)
        timed = self.seconds_per_image
        untried = [way for way in candidates if way not in timed]
        return untried[0] if untried else min(candidates, key=timed.__getitem__)

    def score(
        self, physical_batch: int, images: int, scoring: Callable[[int, str], Scores]
    ) -> Scores:
        """`scoring(batch, layout)` of a split of `images` images, in `way(physical_batch)`,
        timed while the candidates are being tried. `scoring` must return only once the
        device has finished (reading its scores as Python numbers does)."""
        way = self.way(physical_batch)
        if not self.timed or way in self.seconds_per_image or images == 0:
            return scoring(*way)
        started = self.clock()
        scores = scoring(*way)
        self.seconds_per_image[way] = (self.clock() - started) / images
        return scores
