"""Several seeds per config: one row per config with the mean, and the spread kept.

Trials are the same config when every `config.` column but the seed (and the search's
own bookkeeping) is equal. With one trial per config the frame is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from analysis.load import setting_columns, settings_key
from analysis.same_work import OWN_PREFIX
from trainables.metrics import STATUS_ORDER


def _severity(status: str) -> int:
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else 0


def aggregate_repeats(frame: pd.DataFrame, objectives: Mapping[str, str]) -> pd.DataFrame:
    """Mean of each objective over a config's seeds, with `<objective>_std` and `seeds`.

    A config is ok only if every seed was ok; otherwise it takes its worst status.
    """
    keys = setting_columns(frame)
    if not keys:
        return frame
    settings = settings_key(frame, keys)
    if not settings.duplicated(keep=False).any():
        return frame
    groups = frame.groupby(settings, sort=False)
    rows = []
    for _, group in groups:
        row = group.iloc[0].to_dict()
        row["seeds"] = len(group)
        row["trial_id"] = "+".join(group["trial_id"].astype(str))
        worst = min(group["status"], key=_severity)
        row["status"] = worst
        for name in objectives:
            values = group[name].to_numpy(dtype=float)
            # a pooled objective (`analysis.same_work`) spreads as the trials' own values did
            own = f"{OWN_PREFIX}{name}"
            spread = group[own].to_numpy(dtype=float) if own in group else values
            # A seed that never reached a target (inf) makes the mean inf and the spread
            # undefined: said as it is, without numpy's warnings.
            with np.errstate(invalid="ignore"):
                row[name] = float(np.mean(values))
                row[f"{name}_std"] = float(np.std(spread, ddof=1)) if len(values) > 1 else 0.0
                if own in group:
                    row[own] = float(np.mean(spread))
        rows.append(row)
    return pd.DataFrame(rows)
