"""A fixed workload timed beside a CPU trial's own steps: the unit its speed is read in.

A host's speed moves between moments (other tenants of the machine): on this project's
2-core machine a config's speed moved 1.4-1.9x between windows two minutes apart, so trials
timed at different moments of one search, even of one config, differed by as much
(docs/RESULTS.md, section 44). A reference timed next to the config's own blocks moves with
them: the config's speed over the reference's moved 1.05-1.16x over the same windows. So a
CPU trial times a block of this reference after its config's blocks now and then
(`trainables.speed.SpeedWindow`), and reads its speed as (its blocks' speed over the
reference's, timed together) times the reference's speed the search measured once as it
started (`TrainSettings.speed_scale`, `measure_scales`): every trial of the search on one
scale, whatever moment it was timed at.

The reference is the small CNN at `REFERENCE_BATCH` images of 32 px, on random images, at
learning rate 0 (the same work every step), trained by the project's one step
(`trainables.step.train_step`), in the trial's own arithmetic: float32 or bfloat16 autocast
(AMP on a CPU), contiguous or channels-last (`trainables.reference_kinds`). A reference of
another arithmetic moves less as the config does: an AMP, channels-last config's speed over
a float32 reference moved 1.083x across windows on the Intel Xeon, over an AMP one 1.046x
(docs/RESULTS.md, section 44), and six trials of that config two at a time on two cores
spread 1.17x over the float32 reference in one round, 1.05x over their own in two
(section 46, two checkouts minutes apart). So the search
times every kind (`measure_scales`) and each trial takes its own (`TrainSettings.speed_scale`).
Not on a card: there a trial's speed is timed holding the card, and a small CNN's step there
is the host's launch time, not the card's work.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

from trainables.models import small_cnn
from trainables.precision import precision_for
from trainables.reference_kinds import PLAIN_KIND, REFERENCE_KINDS, kind_settings
from trainables.step import train_step

# 32 images: at 16 a trial read its speed 1.2-1.5x too fast over the reference (a step so
# short that what the trial's own steps left behind weighed on it: `SpeedReference.__call__`),
# at 64 a step costs twice as long (docs/RESULTS.md, section 55)
REFERENCE_BATCH = 32
REFERENCE_IMAGE_SIZE = 32
# the seconds a block of the reference takes at least (one step where that is longer): one
# step, about 10 ms, on this project's 2-core machines, after an untimed one
REFERENCE_BLOCK_SECONDS = 0.005
WARMUP_STEPS = 2  # allocations, the first kernels: before the first timed block
# how long the search times the references, all kinds in turn (at least six blocks of each):
# its scales a few seconds apart spread as much timed 1 s as 3 s (the machine's moment
# decides them, not the timing's length), and the search's first trial waits for them
# (docs/RESULTS.md, section 58)
SCALE_SECONDS = 1.0


class SpeedReference:
    """The reference's training steps on the CPU, in one arithmetic (`kind`, of
    `REFERENCE_KINDS`): each call trains a block of them (at least `REFERENCE_BLOCK_SECONDS`)
    and returns its images per second. Built and warmed up without touching the process's
    random state (a trial's own draws stay as they were)."""

    def __init__(
        self, kind: str = PLAIN_KIND, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        amp, channels_last = kind_settings(kind)
        self.kind, self._clock = kind, clock
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self._model = small_cnn(num_classes=2, image_size=REFERENCE_IMAGE_SIZE)
            shape = (REFERENCE_BATCH, 3, REFERENCE_IMAGE_SIZE, REFERENCE_IMAGE_SIZE)
            images = torch.randn(shape).contiguous(memory_format=memory_format)
            self._batch = [(images, torch.randint(0, 2, (REFERENCE_BATCH,)))]
        self._model.to(memory_format=memory_format)
        self._optimizer = torch.optim.SGD(self._model.parameters(), lr=0.0)
        self._precision = precision_for(amp, "bfloat16", torch.device("cpu"))  # a CPU trial's
        self.steps = 1
        for _ in range(WARMUP_STEPS):
            self._step()
        # a first block, untimed, sizes the blocks: in a trial's first epoch the first
        # block timed read 2.5-3.5x slower than the rest (its ratio an outlier), after warm-up
        self()

    def _step(self) -> None:
        train_step(self._model, self._optimizer, self._batch, self._precision,
                   images=REFERENCE_BATCH)  # fmt: skip

    def __call__(self) -> float:
        """A block's images per second, after an untimed step. A trial times the reference
        right after its own steps, which leave the reference's weights and activations out
        of the caches: timed from there, a reference of 16 images ran slower than where the
        search timed its scale, more so after larger batches, and a config's speed over it
        read 1.18-1.28x the config's own at batch 32 and 1.52x at batch 256; after an
        untimed step, over a reference of 32 images, 0.96x and 0.995x (docs/RESULTS.md,
        section 55)."""
        self._step()
        steps = self.steps
        started = self._clock()
        for _ in range(steps):
            self._step()
        seconds = self._clock() - started
        if seconds < REFERENCE_BLOCK_SECONDS:  # more steps a block, from the next one on
            wanted = steps * REFERENCE_BLOCK_SECONDS / max(seconds, 1e-6)
            self.steps = max(steps + 1, math.ceil(wanted))
        return REFERENCE_BATCH * steps / seconds if seconds > 0 else math.nan


def measure_scales(threads: int, seconds: float = SCALE_SECONDS) -> dict[str, float]:
    """Every reference kind's images per second on this CPU with `threads` torch threads:
    the median of its blocks over `seconds`, the kinds' blocks in turn, so that each kind's
    median is over the same moments (a search's `TrainSettings.speed_scale`). In the
    process a trial would run in (the allocator held as a trial's is,
    `trainables.host_memory`): a trial's reference blocks are timed there."""
    from trainables.host_memory import hold_host_allocator

    hold_host_allocator()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        references = [SpeedReference(kind) for kind in REFERENCE_KINDS]
        rates: dict[str, list[float]] = {kind: [] for kind in REFERENCE_KINDS}
        ends = time.perf_counter() + seconds
        while time.perf_counter() < ends or min(map(len, rates.values())) < 6:
            for reference in references:
                rates[reference.kind].append(reference())
    finally:
        torch.set_num_threads(threads_before)
    return {kind: statistics.median(kind_rates) for kind, kind_rates in rates.items()}
