"""Ablations around the front: after the search, the knee trial (`search.ablation.around:
knee`; `front`: every front trial, the knee first, while its trials last) re-run with one
sampled setting changed at a time, and unchanged on other seeds for the noise floor.

What each setting is changed to (`alternatives`): a switch is switched; a category (the
optimizer) goes to each other value in the space; a number to its neighbours in the space
(half and double the batch, the next accumulation value; a range: half and double, or a
quarter of the range either way, inside the range). A setting that does nothing on the
device (the cuDNN autotuner on a CPU) is not run: the report says so.

The plan comes in rounds, so that a few trials still cover every setting once: the
nearest other value of every setting, then the next ones; the noise-floor seeds are spread
over it (the first run first), so the noise floor holds the machine's drift too.
An ablation of a setting that changes the work of a step (all but the learning rate, its
warmup and the seed: `trainables.settings.SAME_WORK_PER_IMAGE`) is timed against its base in
alternation after its last epoch (`speed_baseline`, carried as a note): its speed effect is
that ratio, clear of the machine's drift. Ablation trials are trials like the others (Tune,
MLflow children tagged `ablation_of`, pruned on running out of memory) but no suggestions:
Tune's own generator runs them, in a folder of their own (`ablations/` in the search's), so
the sampler never hears of them, early stopping never sees them and the front never holds
them. A resumed search resumes them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analysis.flat import as_written
from search.config import AblationSection
from search.space import SpaceParam
from trainables.metrics import (
    ABLATION,
    ABLATION_OF,
    NOISE_FLOOR,
    SEARCH_NOTES,
    TIMED_AGAINST_NOTE,
)
from trainables.settings import SAME_WORK_PER_IMAGE, TrainSettings
from trainables.techniques import idle_settings

NOISE_SEED_OFFSET = 1000  # noise-floor seeds: the base's seed + 1000, + 1001, ...


@dataclass(frozen=True)
class Change:
    """One ablation of a base config: `setting` set to `value` (the seed: a noise-floor run)."""

    setting: str
    value: Any

    @property
    def label(self) -> str:
        """`amp=true`, `batch_size=128`, `optimizer=adam`: as written in a config."""
        if self.setting == "seed":
            return NOISE_FLOOR
        return f"{self.setting}={as_written(self.value)}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def alternatives(param: SpaceParam, value: Any) -> list[Any]:
    """The values an ablation tries for a setting of the space now at `value`, nearest
    first (see the module)."""
    if param.kind in ("choice", "grid"):
        others = [v for v in param.values if v != value]
        if isinstance(value, bool) or not all(map(_is_number, param.values)):
            return others  # a switch, or each other category, in the space's order
        below = [v for v in others if v < value]
        above = [v for v in others if v > value]
        return [*([max(below)] if below else []), *([min(above)] if above else [])]
    if not _is_number(value):
        return []
    if param.kind == "randint":
        steps = [value - 1, value + 1]
    elif param.kind == "loguniform":
        steps = [value / 2, value * 2]
    else:
        quarter = (param.high - param.low) / 4
        steps = [value - quarter, value + quarter]
    inside = [min(max(step, param.low), param.high) for step in steps]
    return [v for v in dict.fromkeys(inside) if not math.isclose(v, value)]


def plan_changes(
    base: Mapping[str, Any],
    space: Mapping[str, SpaceParam],
    seeds: int,
    on_gpu: bool,
    max_trials: int | None = None,
) -> list[Change]:
    """The changes of one base config in the order they are run, at most `max_trials` of them,
    the noise-floor seeds always among them (none where they leave no room for a change):
    the settings' changes in rounds, and the seeds spread over them, the first run first,
    so that the noise floor also holds how the machine drifts while the ablations run."""
    rounds: list[list[Change]] = []
    for key in ablated_settings(space, on_gpu):
        if key not in base:
            continue
        for depth, value in enumerate(alternatives(space[key], base[key])):
            if depth >= len(rounds):
                rounds.append([])
            rounds[depth].append(Change(key, value))
    changes = [change for round_ in rounds for change in round_]
    if max_trials is not None:
        if max_trials <= seeds:
            return []
        changes = changes[: max_trials - seeds]
    seed = int(base.get("seed", 0))
    floor = [Change("seed", seed + NOISE_SEED_OFFSET + i) for i in range(seeds)]
    # several seeds may fall before one change (fewer changes than seeds): each is kept
    at: dict[int, list[Change]] = {}
    for i in range(seeds):
        at.setdefault(round(i * len(changes) / seeds), []).append(floor[i])
    planned: list[Change] = []
    for index, change in enumerate([*changes, None]):
        planned += at.get(index, [])
        if change is not None:
            planned.append(change)
    return planned


def ablated_settings(space: Mapping[str, SpaceParam], on_gpu: bool) -> list[str]:
    """The sampled settings an ablation changes: all but the seed and those that do nothing
    on the device."""
    idle = idle_settings(on_gpu)
    return [key for key, param in space.items() if key != "seed" and key not in idle
            and (param.kind not in ("choice", "grid") or len(param.values) > 1)]  # fmt: skip


def ablation_trials(plan: AblationSection, space: Mapping[str, SpaceParam], on_gpu: bool) -> int:
    """The trials the ablations add at most: `plan.max_trials`, or the noise-floor seeds
    and one change of every ablated setting."""
    if plan.max_trials is not None:
        return plan.max_trials
    return plan.seeds + len(ablated_settings(space, on_gpu))


def ablation_points(
    bases: Sequence[tuple[str, Mapping[str, Any]]],
    space: Mapping[str, SpaceParam],
    plan: AblationSection,
    on_gpu: bool,
) -> list[dict[str, Any]]:
    """The ablation trials' configs, at most the plan's trials (`ablation_trials`): each base
    (trial id, its config) in turn, with its changes in order; each config notes the trial
    it ablates and how."""
    max_trials = ablation_trials(plan, space, on_gpu)
    points: list[dict[str, Any]] = []
    for trial_id, config in bases:
        # every point sets the seed: the trainable's default where the search left it
        base = {"seed": TrainSettings.model_fields["seed"].default}
        base |= {key: value for key, value in config.items() if key not in SEARCH_NOTES}
        for change in plan_changes(base, space, plan.seeds, on_gpu, max_trials - len(points)):
            point = {**base, change.setting: change.value, ABLATION_OF: trial_id,
                     ABLATION: change.label}  # fmt: skip
            if change.setting not in SAME_WORK_PER_IMAGE:
                point[TIMED_AGAINST_NOTE] = json.dumps({change.setting: base[change.setting]})
            points.append(point)
    return points


def describe(points: Sequence[Mapping[str, Any]]) -> str:
    """The plan in a line: how many trials around which trials, and what they change."""
    bases = list(dict.fromkeys(str(point[ABLATION_OF]) for point in points))
    changes = list(dict.fromkeys(str(point[ABLATION]) for point in points))
    around = f"trial {bases[0]}" if len(bases) == 1 else f"{len(bases)} front trials"
    return f"{len(points)} ablation trials around {around}: {', '.join(changes)}"
