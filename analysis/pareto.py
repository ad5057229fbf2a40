"""Pareto maths over a trials DataFrame: pure functions of numbers, tested alone.

Directions are turned into "lower is better" exactly once, in `objective_matrix`.
"""

from __future__ import annotations

from collections.abc import Mapping

import moocore
import numpy as np
import pandas as pd

FEASIBLE_STATUS = "ok"


def objective_matrix(frame: pd.DataFrame, objectives: Mapping[str, str]) -> np.ndarray:
    """The objectives as an (n, k) float array in which lower is better in every column."""
    signs = np.array([-1.0 if direction == "max" else 1.0 for direction in objectives.values()])
    values = frame[list(objectives)].to_numpy(dtype=float)
    return values * signs


def feasible_mask(frame: pd.DataFrame, objectives: Mapping[str, str]) -> np.ndarray:
    """Trials that may sit on the front: status ok and no objective missing (NaN)."""
    ok = (frame["status"] == FEASIBLE_STATUS).to_numpy() if "status" in frame else True
    values = frame[list(objectives)].to_numpy(dtype=float)
    return np.asarray(ok & ~np.isnan(values).any(axis=1), dtype=bool)


def pareto_ranks(frame: pd.DataFrame, objectives: Mapping[str, str]) -> pd.Series:
    """Non-dominated sorting: 0 for the front, 1 for the front once it is removed, ...

    Infeasible trials get no rank (NaN); equal points share a rank.
    """
    ranks = pd.Series(np.nan, index=frame.index, name="pareto_rank")
    mask = feasible_mask(frame, objectives)
    if mask.any():
        points = objective_matrix(frame.loc[mask], objectives)
        ranks.loc[mask] = moocore.pareto_rank(points)
    return ranks


def mark_front(frame: pd.DataFrame, objectives: Mapping[str, str]) -> pd.DataFrame:
    """`frame` plus `pareto_rank` and `is_pareto`, ordered by rank, then the first objective."""
    marked = frame.copy()
    marked["pareto_rank"] = pareto_ranks(frame, objectives)
    marked["is_pareto"] = marked["pareto_rank"] == 0
    first, direction = next(iter(objectives.items()))
    return marked.sort_values(
        ["pareto_rank", first], ascending=[True, direction == "min"], na_position="last"
    )
