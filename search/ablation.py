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
over it (the first run first), so the noise floor holds the machine's drift too. By
default the floor runs first instead (`search.ablation.skip_seed_fragile`, `ScreenedOrder`):
a config that learned nothing on one of its seeds is not ablated, and around the knee the
next front trial takes its place (docs/RESULTS.md, section 66); speeds are timed in
alternation, so the floor's place no longer carries the drift into any effect.
An ablation of a setting that changes the work of a step (all but the learning rate, its
warmup and the seed: `trainables.settings.SAME_WORK_PER_IMAGE`) is timed against its base in
alternation after its last epoch (`speed_baseline`, carried as a note): its speed effect is
that ratio, clear of the machine's drift. Ablation trials are trials like the others (Tune,
MLflow children tagged `ablation_of`, pruned on running out of memory) but no suggestions:
their own searcher runs them (`search.ablation_searcher`), in a folder of their own
(`ablations/` in the search's), so the sampler never hears of them, early stopping never
sees them and the front never holds them. A resumed search resumes them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from analysis.flat import as_written
from search.config import AblationSection
from search.space import SpaceParam
from trainables.metrics import (
    ABLATION,
    ABLATION_OF,
    NOISE_FLOOR,
    SEARCH_NOTES,
    STATUS_OK,
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
    floor_first: bool = False,
) -> list[Change]:
    """The changes of one base config in the order they are run, at most `max_trials` of them,
    the noise-floor seeds always among them (none where they leave no room for a change):
    the settings' changes in rounds, and the seeds spread over them, the first run first,
    so that the noise floor also holds how the machine drifts while the ablations run;
    `floor_first`: every seed before the changes (screened, `screened_order`)."""
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
    if floor_first:
        return [*floor, *changes]
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


def base_points(
    trial_id: str,
    config: Mapping[str, Any],
    space: Mapping[str, SpaceParam],
    plan: AblationSection,
    on_gpu: bool,
    room: int,
    floor_first: bool = False,
) -> list[dict[str, Any]]:
    """One base's ablation trials' configs (at most `room`), in order (`plan_changes`); each
    config notes the trial it ablates and how."""
    # every point sets the seed: the trainable's default where the search left it
    base = {"seed": TrainSettings.model_fields["seed"].default}
    base |= {key: value for key, value in config.items() if key not in SEARCH_NOTES}
    points = []
    for change in plan_changes(base, space, plan.seeds, on_gpu, room, floor_first):
        point = {**base, change.setting: change.value, ABLATION_OF: trial_id,
                 ABLATION: change.label}  # fmt: skip
        if change.setting not in SAME_WORK_PER_IMAGE:
            point[TIMED_AGAINST_NOTE] = json.dumps({change.setting: base[change.setting]})
        points.append(point)
    return points


def candidate_points(
    bases: Sequence[tuple[str, Mapping[str, Any]]],
    space: Mapping[str, SpaceParam],
    plan: AblationSection,
    on_gpu: bool,
    each_its_own_room: bool = False,
    floor_first: bool = False,
) -> list[list[dict[str, Any]]]:
    """Each base's (trial id, its config) ablation trials' configs within the plan's trials
    (`ablation_trials`): shared out in turn, a later base getting what the earlier left, or
    (`each_its_own_room`: candidates of which one is ablated) each base all of them; a base
    with no room left out."""
    most = ablation_trials(plan, space, on_gpu)
    candidates: list[list[dict[str, Any]]] = []
    for trial_id, config in bases:
        room = most if each_its_own_room else most - sum(map(len, candidates))
        points = base_points(trial_id, config, space, plan, on_gpu, room, floor_first)
        if points:
            candidates.append(points)
    return candidates


def ablation_points(
    bases: Sequence[tuple[str, Mapping[str, Any]]],
    space: Mapping[str, SpaceParam],
    plan: AblationSection,
    on_gpu: bool,
) -> list[dict[str, Any]]:
    """The ablation trials' configs, at most the plan's trials: each base in turn, with its
    changes in order (`candidate_points`)."""
    return [point for points in candidate_points(bases, space, plan, on_gpu) for point in points]


# Front trials, in order of balance, whose noise floors may run before one is ablated
# around the knee (`search.ablation.skip_seed_fragile`): each costs its seeds' runs, and a
# trial further from the knee answers for a less balanced config.
KNEE_CANDIDATES = 3


@dataclass(frozen=True)
class ScreenedOrder:
    """The ablation trials of a plan whose bases' noise floors run first
    (`search.ablation.skip_seed_fragile`): each candidate base's configs, its floor first
    (`base_points(..., floor_first=True)`); `around` as the plan's. Around the knee, the
    first candidate whose config learned on every floor seed (no run below `min_accuracy`)
    is ablated, and where none did, the first (the knee); around the front, every candidate
    that did. Unscreened (`screened` False): every candidate's configs as planned."""

    candidates: tuple[tuple[dict[str, Any], ...], ...]
    around: Literal["knee", "front"] = "knee"
    screened: bool = True
    min_accuracy: float | None = None

    def decided(
        self, floors: Mapping[tuple[str, int], float | None]
    ) -> tuple[list[dict[str, Any]], bool]:
        """(the configs to run so far, in order; whether that is all of them), given the
        floor runs that ended (`floor_key` -> their `best_val_acc`, None where they ended
        without one: no sign of a seed it fails on). Until a candidate's floor has ended,
        nothing after it is decided."""
        if not self.screened:
            return [point for candidate in self.candidates for point in candidate], True
        decided: list[dict[str, Any]] = []
        for candidate in self.candidates:
            floor = [point for point in candidate if point[ABLATION] == NOISE_FLOOR]
            decided += floor
            if any(floor_key(point) not in floors for point in floor):
                return decided, False
            if self.learns_on_every_seed([floors[floor_key(point)] for point in floor]):
                decided += [point for point in candidate if point[ABLATION] != NOISE_FLOOR]
                if self.around == "knee":
                    return decided, True
        if self.around == "knee" and self.candidates:  # none learned on every seed: the knee
            decided += [point for point in self.candidates[0] if point[ABLATION] != NOISE_FLOOR]
        return decided, True

    def learns_on_every_seed(self, accuracies: Sequence[float | None]) -> bool:
        """Whether no floor run ended below the min accuracy (one at chance learned nothing)."""
        floor = self.min_accuracy
        return floor is None or not any(a is not None and a < floor for a in accuracies)

    @property
    def most_trials(self) -> int:
        """The trials the order runs at most (every candidate's floor and changes)."""
        return sum(len(candidate) for candidate in self.candidates)


def floor_accuracy(result: Mapping[str, Any] | None) -> float | None:
    """A floor run's `best_val_acc` as its order reads it: None (no sign of a seed it fails
    on) where it raised or did not end ok (pruned: the report's floor leaves it out too)."""
    if not result or result.get("status") != STATUS_OK or result.get("best_val_acc") is None:
        return None
    return float(result["best_val_acc"])


def floor_key(point: Mapping[str, Any]) -> tuple[str, int]:
    """A noise-floor run's identity in a plan: (the trial it ablates, its seed)."""
    return str(point[ABLATION_OF]), int(point["seed"])


def describe(points: Sequence[Mapping[str, Any]]) -> str:
    """The plan in a line: how many trials around which trials, and what they change."""
    bases = list(dict.fromkeys(str(point[ABLATION_OF]) for point in points))
    changes = list(dict.fromkeys(str(point[ABLATION]) for point in points))
    around = f"trial {bases[0]}" if len(bases) == 1 else f"{len(bases)} front trials"
    return f"{len(points)} ablation trials around {around}: {', '.join(changes)}"


def describe_order(order: ScreenedOrder) -> str:
    """The plan in a line (`describe`), and where its floors run first, what they decide."""
    if not order.candidates:
        return "none"
    if not order.screened:
        return describe([point for candidate in order.candidates for point in candidate])
    if order.around == "front":
        line = describe([point for candidate in order.candidates for point in candidate])
        return (f"{line} (up to; each trial's noise floor first, and one whose config learns "
                "on some seeds only is not ablated)")  # fmt: skip
    line = describe(list(order.candidates[0]))
    others = [str(candidate[0][ABLATION_OF]) for candidate in order.candidates[1:]]
    if not others:
        return f"{line} (its noise floor first)"
    return (f"{line} (its noise floor first; where its config learns on some seeds only, the "
            f"next front trial's in turn, {', '.join(others)}, and the first that learns on "
            "every seed is ablated instead)")  # fmt: skip
