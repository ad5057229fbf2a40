"""Trials packed on a card by their predicted memory (`resources.pack: memory`).

Ray's fractional GPUs are counts, not memory: with a fixed share (0.25) a small config
leaves three quarters of its quarter empty and a large one runs out of memory in it. Here
each trial asks Ray for the share its config needs: the memory model's predicted peak of
its first step (`search.feasibility.MemoryModel`, learned from the trials' reports), a
margin, and what its process holds outside the allocator (the CUDA context and libraries,
with the reserve for what they grow by), as a fraction of the card rounded up to
`SHARE_STEP`. Until the model can predict a config (no trial has reported the card yet),
the trial gets the configured share (`resources.gpu`); after the first report, a memory
group no trial has run is sized by the driver's CPU meter scaled by the largest
card-to-meter ratio the trials showed, so packing acts from the second trial on, not only
on kinds of config seen twice.
A share that proves too small ends as an out-of-memory trial, pruned; the model then
holds that its config needs more than the limit it ran out under (with the margin), so
the next config like it asks for more, where with a fixed share configs that need at
least as much are never started.

Tune asks for a trial's resources in the driver as it creates the trial, through the
function given to `tune.with_resources`; Tune keeps that function in its registry (a
pickled copy), so it finds the search's live model by name (`LIVE_MODELS`, filled by the
model itself when it is built or restored) rather than holding it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from trainables.settings import TrainSettings

# Shares are whole sixteenths of a card. Tune hands a finished trial's process to the next
# trial only where both ask for the same resources (`reuse_actors`), so configs whose needs
# differ by a few hundred MiB must ask for the same share, or every trial starts a process
# of its own, one at a time (docs/RESULTS.md section 42: in hundredths of a card the packed
# search never ran more than three at once). Sixteen fit a card (the lent machines' 16
# cores at one CPU a trial); 1/16 is exact in binary and in the four decimals Ray keeps.
SHARE_STEP = 0.0625
# On top of the predicted peak: the line through first steps misses later epochs'
# fragmentation and the evaluation's cached blocks (the allocator gives a cache back before
# it refuses, so those cost time, not a failure). A choice, not yet measured on a card.
MEMORY_MARGIN = 0.2


class SharesByMemory(Protocol):
    """What packing asks of a memory model (`search.feasibility.MemoryModel`)."""

    def share(self, settings: TrainSettings) -> float | None: ...


# The memory model of each search running in this process, by the search's name.
LIVE_MODELS: dict[str, SharesByMemory] = {}


def share_of_card(needed_mb: float, card_mb: float, step: float = SHARE_STEP) -> float:
    """The fraction of a card of `card_mb` that holds `needed_mb`, rounded up to `step`;
    at least one step, at most the whole card."""
    if not (needed_mb > 0 and card_mb > 0):
        raise ValueError(f"needs a positive need and card size, got {needed_mb}, {card_mb}")
    steps = math.ceil(needed_mb / card_mb / step - 1e-9)  # 1e-9: an exact fit stays exact
    return min(1.0, round(max(1, steps) * step, 4))


@dataclass(frozen=True)
class PackedResources:
    """The resources of a trial of search `search` (its name in `LIVE_MODELS`), for
    `tune.with_resources`: `cpu` CPUs and the card share its config's predicted memory
    needs, or `default_gpu` where the model cannot tell."""

    search: str
    cpu: float
    default_gpu: float

    def __call__(self, config: dict[str, Any]) -> dict[str, float]:
        return {"cpu": self.cpu, "gpu": self.gpu_share(config)}

    def gpu_share(self, config: dict[str, Any]) -> float:
        # here: the memory model imports this module, which stays free of torch and Ray
        from search.trainable import without_notes
        from trainables.metrics import PREDICTED_FROM
        from trainables.settings import TrainSettings

        if config.get(PREDICTED_FROM):  # it ends before it trains: it needs no memory
            return SHARE_STEP
        model = LIVE_MODELS.get(self.search)
        if model is None:
            return self.default_gpu
        share = model.share(TrainSettings.from_config(without_notes(config)))
        return self.default_gpu if share is None else share
