"""Trend tables: a metric's mean and spread by one or two settings, over finished trials.

The seed studies read their answers off such tables (accuracy by batch size, per optimizer).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.load import CONFIG_PREFIX, typed_param
from analysis.pareto import finished_mask


def _cell(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return "-"
    if len(values) == 1:
        return f"{values.iloc[0]:.3f}"
    mean, finite = values.mean(), values[np.isfinite(values)]
    if len(finite) < len(values):  # e.g. time_to_target_s of seeds that never got there
        rest = f", the rest {finite.mean():.3f}" if len(finite) else ""
        return f"{mean:.3f} (n={len(values)}: {len(values) - len(finite)} {mean:.3f}{rest})"
    return f"{mean:.3f} ± {values.std():.3f} (n={len(values)})"


def trend_table(
    frame: pd.DataFrame, value: str, rows: str, columns: str | None = None
) -> pd.DataFrame:
    """Mean ± std of `value` over the trials that ended ok, by setting `rows` (and
    `columns`), e.g. best_val_acc by batch_size and optimizer. Settings are named as in the
    config (`batch_size`), trials are one per seed, so the spread is the seeds'."""
    finished = frame[finished_mask(frame)]
    keys = [_setting_column(frame, name) for name in (rows, columns) if name]
    grouped = finished.groupby(keys, dropna=False)[value].apply(_cell)
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
