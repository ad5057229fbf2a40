"""The large-batch techniques, one table: the setting that switches each on, and what it
does to the memory of a training step at the same physical batch.

The feasibility rule (a config needs at least the memory of one that ran out), the
capacity table (`python -m search.capacity`) and the report's technique effects all read
this table, so adding a technique is one entry here (plus its tests and the switch in the
training loop). Torch-free: the search's CLI reads it before torch loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

# What switching a technique on does to a step's peak at the same physical batch:
# "saves" needs no more (checkpointing), "costs" needs no less (the cuDNN autotuner's
# workspaces), "mixed" needs less at some batches and more at others (AMP: half-size
# activations, but half-size copies of the weights on top: below a model's crossover batch
# it needs more), "none" leaves the step as it is (the physical batch carries
# accumulation's and AdaBatch's effect on memory).
MemoryEffect = Literal["saves", "costs", "mixed", "none"]


def _is_true(value: object) -> bool:
    return value is True


def _above(threshold: float) -> Callable[[object], bool]:
    def above(value: object) -> bool:
        try:
            return float(value) > threshold  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False

    return above


@dataclass(frozen=True)
class Technique:
    name: str  # as the report and the capacity table name it
    key: str  # the trainable setting that switches it
    is_on: Callable[[object], bool]  # from the setting's value
    memory: MemoryEffect
    label: str = ""  # in the capacity table's rows; "": the name
    gpu_only: bool = False  # does nothing on a CPU
    on: object = True  # the setting's value when the capacity table switches it on
    off: object = False


TECHNIQUES: dict[str, Technique] = {
    technique.name: technique
    for technique in (
        Technique("amp", "amp", _is_true, "mixed", label="AMP"),
        Technique(
            "grad_checkpointing", "grad_checkpointing", _is_true, "saves", label="checkpointing"
        ),
        Technique("accumulation", "accumulation_steps", _above(1), "none", on=2, off=1),
        Technique("adabatch", "adabatch_growth", _above(1), "none", on=2, off=1),
        Technique("warmup", "warmup_epochs", _above(0), "none", on=2, off=0),
        Technique("augment", "augment", _is_true, "none"),
        Technique(
            "cudnn_benchmark",
            "cudnn_benchmark",
            _is_true,
            "costs",
            label="cuDNN autotuner",
            gpu_only=True,
        ),
    )
}


def switched_on(settings: object, effect: MemoryEffect) -> frozenset[str]:
    """The techniques with memory `effect` that `settings` (a TrainSettings) has on."""
    return frozenset(
        name
        for name, technique in TECHNIQUES.items()
        if technique.memory == effect and technique.is_on(getattr(settings, technique.key))
    )


def memory_techniques(effect: MemoryEffect) -> list[Technique]:
    return [technique for technique in TECHNIQUES.values() if technique.memory == effect]


def capacity_rows() -> list[tuple[str, dict[str, object]]]:
    """(row name, settings) of the capacity table, as the seed article's tables: the
    baseline with every memory-costing technique on (its baseline ran the cuDNN autotuner),
    each of those off, each technique that can save memory on, then all of those together."""
    costs = memory_techniques("costs")
    savers = [t for t in TECHNIQUES.values() if t.memory in ("mixed", "saves")]
    baseline = {t.key: t.on for t in costs} | {t.key: t.off for t in savers}
    rows = [("baseline", baseline)]
    rows += [(f"{t.label or t.name} off", baseline | {t.key: t.off}) for t in costs]
    rows += [(t.label or t.name, baseline | {t.key: t.on}) for t in savers]
    if len(savers) > 1:
        together = " + ".join(t.label or t.name for t in savers)
        rows.append((together, baseline | {t.key: t.on for t in savers}))
    return rows
