"""What the front means: which technique switches it holds, and what each one does.

For every switch the search varied: how many trials used it, what share of the front uses
it (against its share of all feasible trials), and its median effect on each objective
(median over feasible trials with the switch on, minus with it off).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from analysis.load import CONFIG_PREFIX

# switch -> (config key, "is it on" for a value of that key)
SWITCHES: dict[str, tuple[str, Callable[[object], bool]]] = {
    "amp": ("amp", lambda value: value is True),
    "grad_checkpointing": ("grad_checkpointing", lambda value: value is True),
    "accumulation": ("accumulation_steps", lambda value: _number(value) > 1),
    "adabatch": ("adabatch_growth", lambda value: _number(value) > 1),
    "warmup": ("warmup_epochs", lambda value: _number(value) > 0),
    "optimizer adam": ("optimizer", lambda value: value == "adam"),
    "augment": ("augment", lambda value: value is True),
    "cudnn_benchmark": ("cudnn_benchmark", lambda value: value is True),
}


def _number(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")


def switch_column(frame: pd.DataFrame, switch: str) -> pd.Series | None:
    """True/False per trial for `switch`, or None when the search did not vary it."""
    key, is_on = SWITCHES[switch]
    column = f"{CONFIG_PREFIX}{key}"
    if column not in frame:
        return None
    on = frame[column].map(is_on).astype(bool)
    return on if on.nunique() > 1 else None


def technique_effects(
    frame: pd.DataFrame, objectives: Mapping[str, str], feasible: np.ndarray
) -> pd.DataFrame:
    """One row per varied switch (see the module docstring); `frame` needs `is_pareto`."""
    usable = frame.loc[feasible]
    front = usable[usable["is_pareto"] == True]  # noqa: E712
    rows = []
    for switch in SWITCHES:
        on = switch_column(frame, switch)
        if on is None:
            continue
        on_usable = on.loc[usable.index]
        row: dict[str, object] = {
            "technique": switch,
            "trials_on": int(on.sum()),
            "trials_off": int((~on).sum()),
            "share_of_feasible": float(on_usable.mean()) if len(usable) else np.nan,
            "share_of_front": float(on.loc[front.index].mean()) if len(front) else np.nan,
        }
        for name in objectives:
            with_on = usable.loc[on_usable, name].replace([np.inf, -np.inf], np.nan)
            with_off = usable.loc[~on_usable, name].replace([np.inf, -np.inf], np.nan)
            row[f"effect on {name}"] = float(with_on.median() - with_off.median())
        rows.append(row)
    return pd.DataFrame(rows)
