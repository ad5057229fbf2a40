"""What the front means: which technique switches it holds, and what each one does.

For every switch the search varied: how many trials used it, what share of the front uses
it (against its share of all feasible trials), and its effect on each objective with a 95%
interval, estimated so that the other settings do not masquerade as the switch's effect. As
the ablations give theirs (`analysis.ablations.in_points`): accuracies and gaps in points
(an interval within -100 and +100, `analysis.ablations.points_within`), speeds, memory and
times in percent, estimated on their logarithms so that an interval never claims a switch
takes away more than all of a speed (never below -100%):

- matched pairs where the search has them: configs that differ in this switch only (their
  seeds averaged), the mean of on minus off over the pairs, with a t interval;
- otherwise a linear regression over the feasible trials of the objective on the switch and
  every other setting the search varied (numbers spanning a decade or more on a log scale,
  categories as indicators), the switch's coefficient with its interval (statsmodels OLS);
- "not measurable here" when neither is possible (too few trials for the settings that
  vary, or the switch always moved with another setting), or when the switch does nothing
  on the device the trials ran on (the cuDNN autotuner on a CPU).

A suggestion never started (predicted to run out of memory) used no switch: it is counted
nowhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import statsmodels.api as sm
from scipy import stats

from analysis.ablations import in_points, points_within
from analysis.load import CONFIG_PREFIX, as_numbers, spans_decades, varied_settings
from analysis.pareto import front_of
from trainables.metrics import STATUS_OOM_PREDICTED
from trainables.optimizers import OPTIMIZERS
from trainables.techniques import IDLE_ON_CPU, TECHNIQUES

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Switch:
    key: str  # the config key
    is_on: Callable[[object], bool]
    gpu_only: bool = False  # does nothing on a CPU


def _optimizer_is(name: str) -> Callable[[object], bool]:
    return lambda value: value == name


def switches() -> dict[str, Switch]:
    """Every technique of the table (trainables.techniques), then each optimizer against
    the rest."""
    return {
        **{
            name: Switch(technique.key, technique.is_on, technique.gpu_only)
            for name, technique in TECHNIQUES.items()
        },
        **{
            f"optimizer {name}": Switch("optimizer", _optimizer_is(name))
            for name in OPTIMIZERS
            if name != "sgd"
        },
    }


@dataclass(frozen=True)
class Effect:
    estimate: float  # in points or percent (`in_points`); NaN: not measurable here
    low: float
    high: float
    basis: str  # what it rests on, or why it cannot be measured

    @property
    def interval(self) -> str:
        if not np.isfinite(self.low):
            return "-"
        return f"[{self.low:+.1f}, {self.high:+.1f}]"


def not_measurable(why: str) -> Effect:
    return Effect(np.nan, np.nan, np.nan, f"not measurable here: {why}")


def trials_with(frame: pd.DataFrame, switch: str) -> pd.Series:
    """True/False per trial for `switch` (False where the config does not have its key)."""
    spec = switches()[switch]
    column = f"{CONFIG_PREFIX}{spec.key}"
    if column not in frame:
        return pd.Series(False, index=frame.index)
    return frame[column].map(spec.is_on).astype(bool)


def switch_column(frame: pd.DataFrame, switch: str) -> pd.Series | None:
    """True/False per trial for `switch`, or None when the search did not vary it."""
    on = trials_with(frame, switch)
    return on if on.nunique() > 1 else None


def matched_pairs(
    frame: pd.DataFrame, on: pd.Series, values: pd.Series, others: list[str]
) -> np.ndarray:
    """On minus off of `values` (an objective's, per trial) for every group of trials equal
    in `others`."""
    keys = [frame[column].map(repr) for column in others]
    groups = frame.groupby(keys).groups.values() if keys else [frame.index]
    differences = []
    for index in groups:
        with_on, with_off = values[index][on[index]], values[index][~on[index]]
        if with_on.notna().any() and with_off.notna().any():
            differences.append(with_on.mean() - with_off.mean())
    return np.array(differences, dtype=float)


def design_matrix(frame: pd.DataFrame, on: pd.Series, others: list[str]) -> pd.DataFrame:
    """The switch, an intercept, and the other varied settings as regressors."""
    columns = {"switch": on.astype(float)}
    for column in others:
        numbers = as_numbers(frame[column])
        name = column.removeprefix(CONFIG_PREFIX)
        if numbers is not None:
            columns[name] = np.log10(numbers) if spans_decades(numbers) else numbers
        else:
            dummies = pd.get_dummies(frame[column].map(str), prefix=name, drop_first=True)
            columns.update({c: dummies[c].astype(float) for c in dummies.columns})
    return sm.add_constant(pd.DataFrame(columns, index=frame.index), has_constant="add")


def estimate_effect(
    frame: pd.DataFrame, on: pd.Series, objective: str, others: list[str]
) -> Effect:
    """The switch's effect on `objective` over `frame` (feasible trials), see the module:
    in points for a fraction, else in percent from the logarithms' difference."""
    values = pd.to_numeric(frame[objective], errors="coerce").replace([np.inf, -np.inf], np.nan)
    points = in_points(objective)
    if not points:
        if (values <= 0).any():
            return not_measurable("not a positive amount: no ratio")
        values = np.log(values)
    effect = difference_of(frame, on, values, others)
    if not np.isfinite(effect.estimate):
        return effect
    if points:  # a difference of two fractions: -100 to +100 points, however few the trials
        scaled = (100 * effect.estimate, *points_within(100 * effect.low, 100 * effect.high))
    else:
        scaled = (100 * math.expm1(value) for value in (effect.estimate, effect.low, effect.high))
    return Effect(*scaled, effect.basis)


def difference_of(
    frame: pd.DataFrame, on: pd.Series, values: pd.Series, others: list[str]
) -> Effect:
    """On minus off of `values` over `frame`, from matched pairs or the regression."""
    pairs = matched_pairs(frame, on, values, others)
    if len(pairs) >= 2:
        mean, spread = float(pairs.mean()), stats.sem(pairs)
        half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(pairs) - 1) * spread)
        return Effect(mean, mean - half, mean + half, f"{len(pairs)} matched pairs")
    known = values.notna()
    design = design_matrix(frame, on, others)[known]
    rank = np.linalg.matrix_rank(design.to_numpy(dtype=float))
    if rank < design.shape[1]:
        return not_measurable("the switch always moved with another setting")
    if len(design) - rank < 2:
        return not_measurable(f"{len(design)} trials are too few for the settings that vary")
    fit = sm.OLS(values[known].to_numpy(dtype=float), design.to_numpy(dtype=float)).fit()
    switch = list(design.columns).index("switch")
    low, high = fit.conf_int(alpha=1 - CONFIDENCE)[switch]
    controls = ", ".join(c.removeprefix(CONFIG_PREFIX) for c in others) or "nothing else"
    basis = f"regression on {known.sum()} trials, controlling for {controls}"
    return Effect(float(fit.params[switch]), float(low), float(high), basis)


def started_trials(frame: pd.DataFrame) -> pd.DataFrame:
    """The trials that began training: not those refused before (predicted out of memory)."""
    if "status" not in frame:
        return frame
    return frame[frame["status"] != STATUS_OOM_PREDICTED]


def technique_effects(
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    feasible: np.ndarray,
    on_gpu: bool | None = None,
) -> pd.DataFrame:
    """One row per varied switch (see the module docstring); `frame` needs `is_pareto`.
    `on_gpu` False: the trials ran on CPUs, where GPU-only switches are not measurable."""
    usable = frame.loc[feasible]
    frame = started_trials(frame)
    front = front_of(usable)
    settings = varied_settings(usable)
    rows = []
    for name, spec in switches().items():
        on = switch_column(frame, name)
        if on is None:
            continue
        on_usable = on.loc[usable.index]
        row: dict[str, object] = {
            "technique": name,
            "trials_on": int(on.sum()),
            "trials_off": int((~on).sum()),
            "share_of_feasible": float(on_usable.mean()) if len(usable) else np.nan,
            "share_of_front": float(on.loc[front.index].mean()) if len(front) else np.nan,
        }
        others = [c for c in settings if c != f"{CONFIG_PREFIX}{spec.key}"]
        bases = []
        for objective in objectives:
            if spec.gpu_only and on_gpu is False:
                effect = not_measurable(IDLE_ON_CPU)
            elif on_usable.nunique() < 2:
                effect = not_measurable("no feasible trial has it both on and off")
            else:
                effect = estimate_effect(usable, on_usable, objective, others)
            row[f"effect on {objective}"] = effect.estimate
            row[f"{objective} {CONFIDENCE:.0%} interval"] = effect.interval
            bases.append(effect.basis)
        row["estimated from"] = "; ".join(dict.fromkeys(bases))
        rows.append(row)
    return pd.DataFrame(rows)
