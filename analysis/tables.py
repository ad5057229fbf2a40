"""Trend tables: a metric's mean and spread by one or two settings, over finished trials.

The seed studies read their answers off such tables (accuracy by batch size, per optimizer).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import yaml

from analysis.load import CONFIG_PREFIX


def _cell(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return "-"
    if len(values) == 1:
        return f"{values.iloc[0]:.3f}"
    finite = values[np.isfinite(values)]
    if len(finite) < len(values):  # e.g. time_to_target_s of seeds that never got there
        infinite = len(values) - len(finite)
        rest = f", the rest {finite.mean():.3f}" if len(finite) else ""
        return f"{values.mean():.3f} (n={len(values)}: {infinite} {values.mean():.3f}{rest})"
    return f"{values.mean():.3f} ± {values.std(ddof=1):.3f} (n={len(values)})"


def trend_table(
    frame: pd.DataFrame, value: str, rows: str, columns: str | None = None
) -> pd.DataFrame:
    """Mean ± std of `value` over the trials that ended ok, by setting `rows` (and
    `columns`), e.g. best_val_acc by batch_size and optimizer. Settings are named as in the
    config (`batch_size`), trials are one per seed, so the spread is the seeds'."""
    finished = frame[frame["status"] == "ok"] if "status" in frame else frame
    keys = [f"{CONFIG_PREFIX}{name}" for name in (rows, columns) if name]
    missing = [key for key in keys if key not in frame]
    if missing:
        raise KeyError(f"no setting {missing[0].removeprefix(CONFIG_PREFIX)!r} among the trials")
    grouped = finished.groupby(keys, dropna=False)[value].apply(_cell)
    table = grouped.unstack() if columns else grouped.to_frame(value)
    table.index.name = rows
    if columns:
        table.columns.name = columns
    return table.fillna("-").replace({np.nan: "-"})


def select(frame: pd.DataFrame, conditions: list[str]) -> pd.DataFrame:
    """The trials whose settings match every `name=value` (value read as YAML)."""
    chosen = frame
    for condition in conditions:
        name, _, text = condition.partition("=")
        column = f"{CONFIG_PREFIX}{name}"
        if column not in frame:
            raise KeyError(f"no setting {name!r} among the trials")
        wanted = yaml.safe_load(text)
        chosen = chosen[chosen[column] == wanted]
    return chosen
