"""The large-batch techniques, one table: the setting that switches each on, what it does
to the memory of a training step at the same physical batch, and how it is named.

Everything that lists techniques reads this table: the trial's run name in MLflow, the
memory chart's groups, the report's technique effects, the capacity table's rows
(`python -m search.capacity`), the memory model's groups and the out-of-memory rule (a
config needs at least the memory of one that ran out), and `bench/technique_costs.py`. Adding a
technique is one entry here plus the code that applies it in the training loop (and its
tests: tests/trainables/test_techniques.py adds one and finds it everywhere). Torch-free:
the search's CLI reads it before torch loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

# What switching a technique on does to a step's peak at the same physical batch:
# "saves" needs no more (activation checkpointing), "costs" needs no less (the cuDNN autotuner's
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


# A technique's part of a trial's run name, from the trial's config (where it is on).
RunTag = Callable[[Mapping[str, Any]], str]


def _tag(text: str) -> RunTag:
    return lambda config: text


def _tag_with_value(text: str, key: str) -> RunTag:
    return lambda config: f"{text}{config[key]}"


def _growth_tag(config: Mapping[str, Any]) -> str:
    """`grow2every3`, or `grow2noise` where the gradient noise scale decides."""
    when = "noise" if config.get("adabatch_rule") == "noise_scale" else (
        f"every{config.get('adabatch_interval', 1)}"
    )  # fmt: skip
    return f"grow{config['adabatch_growth']}{when}"


@dataclass(frozen=True)
class Technique:
    name: str  # as the report and the capacity table name it
    key: str  # the trainable setting that switches it
    is_on: Callable[[object], bool]  # from the setting's value
    memory: MemoryEffect
    run_tag: RunTag  # its part of a trial's run name where it is on
    label: str = ""  # in the capacity table's rows and the charts; "": the name
    column: str = ""  # its setting's header in the search's progress table; "": the key
    gpu_only: bool = False  # does nothing on a CPU
    capacity_row: bool = True  # a row of the capacity table where it changes memory
    on: object = True  # the setting's value when the capacity table switches it on
    off: object = False

    @property
    def shown(self) -> str:
        return self.label or self.name

    def on_in(self, config: Mapping[str, Any]) -> bool:
        """Whether a config (a dict of trainable settings) has it on; absent: off."""
        return self.key in config and self.is_on(config[self.key])


TECHNIQUES: dict[str, Technique] = {
    technique.name: technique
    for technique in (
        Technique("amp", "amp", _is_true, "mixed", _tag("amp"), label="AMP"),
        Technique(
            "activation_checkpointing", "activation_checkpointing", _is_true, "saves",
            _tag("recompute"), label="activation checkpointing", column="recompute",
        ),
        Technique(
            "accumulation", "accumulation_steps", _above(1), "none",
            _tag_with_value("acc", "accumulation_steps"), on=2, off=1, column="accum",
        ),
        Technique("adabatch", "adabatch_growth", _above(1), "none", _growth_tag, on=2, off=1,
                  column="grow"),
        Technique(
            "warmup", "warmup_epochs", _above(0), "none",
            _tag_with_value("warm", "warmup_epochs"), on=2, off=0, column="warmup",
        ),
        Technique("augment", "augment", _is_true, "none", _tag("aug"), column="aug"),
        # the norm's per-parameter partial sums: a few floats, no batch-sized buffer
        Technique(
            "gradient_clipping", "grad_clip_norm", _above(0), "none",
            _tag_with_value("clip", "grad_clip_norm"), label="gradient clipping", on=1.0,
            off=None, column="clip",
        ),
        Technique(
            "cudnn_benchmark", "cudnn_benchmark", _is_true, "costs", _tag("cudnn"),
            label="cuDNN autotuner", gpu_only=True, column="cudnn",
        ),
        # other convolution kernels, other workspaces: more or less memory by model
        Technique("channels_last", "channels_last", _is_true, "mixed", _tag("nhwc"),
                  label="channels-last", column="nhwc"),
        # fused kernels keep fewer intermediates, compiled graphs their own buffers; its
        # memory is measured where it trains, not in the capacity table's probes
        Technique("compile", "compile", _is_true, "mixed", _tag("compiled"),
                  label="torch.compile", capacity_row=False),
    )
}  # fmt: skip


# Short headers of settings that are no technique's switch.
OTHER_SETTING_COLUMNS = {"batch_size": "batch"}


def column_of(key: str) -> str:
    """A setting's header in the search's tables (the progress table, the ranked table, the
    report's): its technique's short column, a few others' (`OTHER_SETTING_COLUMNS`), else
    the key itself."""
    for technique in TECHNIQUES.values():
        if technique.key == key and technique.column:
            return technique.column
    return OTHER_SETTING_COLUMNS.get(key, key)


def run_tags(config: Mapping[str, Any]) -> list[str]:
    """The run-name parts of the techniques a trial's config has on, in the table's order."""
    return [t.run_tag(config) for t in TECHNIQUES.values() if t.on_in(config)]


def memory_techniques_shown(on_gpu: bool | None = None) -> list[Technique]:
    """The techniques that change a step's memory, as a chart groups trials by them; those
    that do nothing on a CPU are left out where the trials ran on CPUs (`on_gpu` False)."""
    return [
        t for t in TECHNIQUES.values()
        if t.memory != "none" and not (t.gpu_only and on_gpu is False)
    ]  # fmt: skip


IDLE_ON_CPU = "it does nothing on the CPUs these trials ran on"


def idle_settings(on_gpu: bool | None) -> dict[str, str]:
    """Setting -> why changing it measures nothing where the trials run: the GPU-only
    techniques' settings on CPUs (`on_gpu` False); none where the device is unknown."""
    if on_gpu is not False:
        return {}
    return {t.key: IDLE_ON_CPU for t in TECHNIQUES.values() if t.gpu_only}


def techniques_on(settings: object, effect: MemoryEffect) -> frozenset[str]:
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
    each of those off, then each technique that can save memory on, and all of those
    together, with the memory-costing ones off. What those cost is measured once, by the
    first rows; off, a saving technique's row does not re-tune cuDNN at every batch shape
    its probes try."""
    costs = [t for t in memory_techniques("costs") if t.capacity_row]
    savers = [t for t in TECHNIQUES.values() if t.memory in ("mixed", "saves") and t.capacity_row]
    baseline = {t.key: t.on for t in costs} | {t.key: t.off for t in savers}
    rows = [("baseline", baseline)]
    rows += [(f"{t.shown} off", baseline | {t.key: t.off}) for t in costs]
    plain = baseline | {t.key: t.off for t in costs}
    rows += [(t.shown, plain | {t.key: t.on}) for t in savers]
    if len(savers) > 1:
        together = " + ".join(t.shown for t in savers)
        rows.append((together, plain | {t.key: t.on for t in savers}))
    return rows
