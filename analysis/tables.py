"""Trend tables: a metric's mean and spread by one or two settings, over finished trials.

The seed studies read their answers off such tables (accuracy by batch size, per optimizer).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.load import CONFIG_PREFIX, typed_param
from analysis.pareto import finished_mask


def _cell(trials: pd.DataFrame, value: str) -> str:
    """The mean (± the seeds' spread) over the trials that ended ok, with how many they
    were, and how many of the cell's trials ended otherwise (e.g. "1 of 3 diverged")."""
    finished = finished_mask(trials)
    values = trials.loc[finished, value].dropna()
    ended = trials.loc[~finished, "status"].value_counts() if "status" in trials else []
    others = [f"{count} of {len(trials)} {status}" for status, count in ended.items()]
    if values.empty:
        return f"- ({'; '.join(others)})" if others else "-"
    mean, finite = values.mean(), values[np.isfinite(values)]
    if len(finite) < len(values):  # e.g. time_to_target_s of seeds that never got there
        rest = f", the rest {finite.mean():.3f}" if len(finite) else ""
        text, counts = (
            f"{mean:.3f}",
            f"n={len(values)}: {len(values) - len(finite)} {mean:.3f}{rest}",
        )
    elif len(values) == 1:
        text, counts = f"{mean:.3f}", "n=1"
    else:
        text, counts = f"{mean:.3f} ± {values.std():.3f}", f"n={len(values)}"
    return f"{text} ({'; '.join([counts, *others])})"


def trend_table(
    frame: pd.DataFrame, value: str, rows: str, columns: str | None = None
) -> pd.DataFrame:
    """Mean ± std of `value` over the trials that ended ok, by setting `rows` (and
    `columns`), e.g. best_val_acc by batch_size and optimizer. Settings are named as in the
    config (`batch_size`), trials are one per seed, so the spread is the seeds'; every
    cell says how many seeds it rests on and how many ended pruned or diverged."""
    keys = [_setting_column(frame, name) for name in (rows, columns) if name]
    cells = {key: _cell(group, value) for key, group in frame.groupby(keys, dropna=False)}
    grouped = pd.Series(cells)
    if columns:
        grouped.index = pd.MultiIndex.from_tuples(grouped.index, names=keys)
    else:
        grouped.index = pd.Index(
            [key[0] if isinstance(key, tuple) else key for key in grouped.index]
        )
    table = grouped.unstack() if columns else grouped.to_frame(value)
    table.index.name = rows
    if columns:
        table.columns.name = columns
    return table.fillna("-")


def select(frame: pd.DataFrame, conditions: list[str]) -> pd.DataFrame:
    """The trials whose settings match every `name=value` (value read as YAML)."""
    chosen = frame
    for condition in conditions:
        name, _, text = condition.partition("=")
        chosen = chosen[chosen[_setting_column(frame, name)] == typed_param(text)]
    return chosen


def _setting_column(frame: pd.DataFrame, name: str) -> str:
    column = f"{CONFIG_PREFIX}{name}"
    if column not in frame:
        raise KeyError(f"no setting {name!r} among the trials")
    return column
