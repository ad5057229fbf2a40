"""Pareto maths over a trials DataFrame: pure functions of numbers, tested alone.

Directions are turned into "lower is better" exactly once, in `lower_is_better_signs`,
which `objective_matrix` and `minimised` apply and everything else (ranks, hypervolume,
the knee, early stopping, the charts' fronts) works from.
Feasible trials are those that may sit on a front: status ok, every objective measured,
and (when asked) an accuracy above chance: a model that predicts one class "generalizes"
perfectly and would otherwise crowd the front.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import moocore
import numpy as np
import pandas as pd

from trainables.metrics import STATUS_OK, Z_95, standard_error

Bounds = dict[str, tuple[float, float]]  # objective -> (low, high), mapped to [0, 1]

# Declared normalisation ranges of the objectives that have natural limits.
NATURAL_BOUNDS: Bounds = {
    "best_val_acc": (0.0, 1.0),
    "val_acc": (0.0, 1.0),
    "test_acc": (0.0, 1.0),
    "train_eval_acc": (0.0, 1.0),
    "gen_gap": (0.0, 1.0),  # the positive part of a difference of two accuracies
    "val_test_gap": (0.0, 1.0),
}


def lower_is_better_signs(objectives: Mapping[str, str]) -> np.ndarray:
    """What each objective is multiplied by so that lower is better (-1 for "max"): the one
    place directions become signs; they are their own inverse, to draw values back."""
    return np.array([-1.0 if direction == "max" else 1.0 for direction in objectives.values()])


def objective_matrix(frame: pd.DataFrame, objectives: Mapping[str, str]) -> np.ndarray:
    """The objectives as an (n, k) float array in which lower is better in every column."""
    return frame[list(objectives)].to_numpy(dtype=float) * lower_is_better_signs(objectives)


def minimised(values: Mapping[str, float], objectives: Mapping[str, str]) -> np.ndarray:
    """One trial's objectives (a result or a row), lower is better in every entry."""
    return np.array([float(values[name]) for name in objectives]) * lower_is_better_signs(
        objectives
    )


def finished_mask(frame: pd.DataFrame) -> np.ndarray:
    """Trials that ended `ok` (every trial, for results without a status)."""
    if "status" not in frame:
        return np.ones(len(frame), dtype=bool)
    return (frame["status"] == STATUS_OK).to_numpy(dtype=bool)


def feasible_mask(
    frame: pd.DataFrame, objectives: Mapping[str, str], min_accuracy: float | None = None
) -> np.ndarray:
    """Trials that may sit on the front (see the module docstring)."""
    values = frame[list(objectives)].to_numpy(dtype=float)
    mask = finished_mask(frame) & ~np.isnan(values).any(axis=1)
    if min_accuracy is not None and "best_val_acc" in frame:
        mask &= frame["best_val_acc"].to_numpy(dtype=float) >= min_accuracy
    return mask


def pareto_ranks(
    frame: pd.DataFrame, objectives: Mapping[str, str], min_accuracy: float | None = None
) -> pd.Series:
    """Non-dominated sorting: 0 for the front, 1 for the front once it is removed, ...

    Infeasible trials get no rank (NaN); equal points share a rank.
    """
    ranks = pd.Series(np.nan, index=frame.index, name="pareto_rank")
    mask = feasible_mask(frame, objectives, min_accuracy)
    if mask.any():
        points = objective_matrix(frame.loc[mask], objectives)
        ranks.loc[mask] = moocore.pareto_rank(points)
    return ranks


def mark_front(
    frame: pd.DataFrame, objectives: Mapping[str, str], min_accuracy: float | None = None
) -> pd.DataFrame:
    """`frame` plus `pareto_rank` and `is_pareto`, ordered by rank, then the first objective."""
    marked = frame.copy()
    marked["pareto_rank"] = pareto_ranks(frame, objectives, min_accuracy)
    marked["is_pareto"] = marked["pareto_rank"] == 0
    first = dict(list(objectives.items())[:1])
    marked["_first"] = objective_matrix(marked, first)[:, 0] if first else 0.0
    ordered = marked.sort_values(["pareto_rank", "_first"], na_position="last")
    return ordered.drop(columns="_first")


def declared_bounds(
    frame: pd.DataFrame, objectives: Mapping[str, str], given: Bounds | None = None
) -> Bounds:
    """Normalisation range per objective: given, else natural, else [0, the next power of
    ten above the largest finite value] (throughput, times, memory have no natural top)."""
    bounds: Bounds = {}
    for name in objectives:
        if given and name in given:
            bounds[name] = given[name]
        elif name in NATURAL_BOUNDS:
            bounds[name] = NATURAL_BOUNDS[name]
        else:
            values = frame[name].to_numpy(dtype=float)
            finite = values[np.isfinite(values)]
            top = float(finite.max()) if finite.size else 1.0
            bounds[name] = (0.0, 10.0 ** math.ceil(math.log10(top)) if top > 0 else 1.0)
    return bounds


def normalised(frame: pd.DataFrame, objectives: Mapping[str, str], bounds: Bounds) -> np.ndarray:
    """Objectives in [0, 1] with 0 best and 1 worst (beyond the bounds clipped; the worse
    infinity worst, the better one best; NaN worst)."""
    signs = lower_is_better_signs(objectives)
    ends = np.array([bounds[name] for name in objectives], dtype=float).reshape(-1, 2)
    signed_ends = ends * signs[:, None]  # the bounds in the same lower-is-better terms
    low, high = signed_ends.min(axis=1), signed_ends.max(axis=1)
    matrix = (objective_matrix(frame, objectives) - low) / (high - low)
    return np.clip(np.nan_to_num(matrix, nan=1.0, posinf=1.0, neginf=0.0), 0.0, 1.0)


def hypervolume(
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    bounds: Bounds,
    min_accuracy: float | None = None,
) -> float:
    """Share of the normalised objective box, up to the worst corner (reference point
    (1, ..., 1)), that the feasible trials dominate: 0 for nothing, 1 for the ideal point."""
    mask = feasible_mask(frame, objectives, min_accuracy)
    if not mask.any():
        return 0.0
    points = normalised(frame.loc[mask], objectives, bounds)
    return float(moocore.hypervolume(points, ref=np.ones(len(objectives))))


def front_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows `mark_front` put on the front (none where it has not marked them)."""
    return frame[frame.get("is_pareto", False) == True]  # noqa: E712 (NaN-safe)


def balanced_front(
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    split_sizes: Mapping[str, int] | None = None,
) -> list[object]:
    """The front trials' indices, most balanced first: by distance to the ideal point, each
    objective scaled by the front's own range. Empty without a front.

    With `split_sizes` (the images each accuracy is scored on, as
    `trainables.metrics.standard_error` takes them), an objective is scaled by its range or
    by what its noise spans (`told_apart`), whichever is wider: where the front's trials lie
    within the noise of each other on an objective (a gap of 0.05-0.12 whose standard error
    is 0.035), its range is the noise, and scaled by it that objective would decide the knee
    by chance; scaled by the noise it decides as little as the evidence does."""
    front = front_of(frame)
    if front.empty:
        return []
    points = objective_matrix(front, objectives)
    # the range over the finite values: a target never reached (inf) would make it infinite
    # and take its objective out of the knee; it is that objective's worst end instead
    finite = [column[np.isfinite(column)] for column in points.T]
    low = np.array([column.min() if column.size else 0.0 for column in finite])
    high = np.array([column.max() if column.size else 0.0 for column in finite])
    span = high - low
    if split_sizes is not None:
        noise = told_apart(front, objectives, split_sizes)
        span = np.maximum(span, [noise[name] for name in objectives])
    with np.errstate(invalid="ignore"):
        scaled = (points - low) / np.where(span > 0, span, 1.0)  # finite ones within [0, 1]
    distances = np.linalg.norm(np.nan_to_num(scaled, nan=1.0, posinf=1.0, neginf=0.0), axis=1)
    return [front.index[i] for i in np.argsort(distances, kind="stable")]


def knee_point(
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    split_sizes: Mapping[str, int] | None = None,
) -> object | None:
    """The index of the most balanced front trial (`balanced_front`): the compromise
    closest to the ideal point. None without a front."""
    order = balanced_front(frame, objectives, split_sizes)
    return order[0] if order else None


def told_apart(
    frame: pd.DataFrame, objectives: Mapping[str, str], split_sizes: Mapping[str, int]
) -> dict[str, float]:
    """For each objective, the difference between two of `frame`'s trials that the evidence
    tells from noise: 1.96 standard errors of a difference, sqrt(2) times the trials' median
    standard error (`trainables.metrics.standard_error`). 0 where the objective is exact
    (memory, steps) or nothing is known of it."""
    told = {}
    for name in objectives:
        errors = [standard_error(name, row, split_sizes) for _, row in frame.iterrows()]
        finite = [error for error in errors if math.isfinite(error)]
        told[name] = Z_95 * math.sqrt(2) * float(np.median(finite)) if finite else 0.0
    return told


def dominators(
    points: np.ndarray,
    feasible: np.ndarray | None = None,
    errors: np.ndarray | None = None,
    constraint_column: int | None = None,
    z: float = 1.96,
    decisive: Sequence[int] | None = None,
) -> list[list[int]]:
    """For each row of a "lower is better" matrix, the rows that dominate it (no worse in
    every column, better in one). NaN counts as worst.

    With `feasible` (a mask of the rows that meet a constraint), constrained domination:
    a feasible row dominates every infeasible one, whatever their objectives, and rows on
    the same side of the constraint compare as above.

    With `errors` (each value's standard error, the same shape), domination on evidence:
    row i dominates row j only where it is worse in no column by more than z standard
    errors of the difference (sqrt(e_i² + e_j²)) and better in one by more than that; a
    feasible row dominates an infeasible one only where it is better beyond that in the
    `constraint_column` (the objective the constraint is on). `errors` of shape (rows,
    columns, 2) give each value's standard error below it and above it: whether i is worse
    than j beyond the noise weighs how much lower i may be and how much higher j may be
    (sqrt(below_i² + above_j²)), and better, the other sides (`trainables.metrics.error_sides`:
    a speed's interval is not symmetric): the bounds of a difference from two lopsided
    intervals as the MOVER method recovers them (Zou and Donner, 2008).

    With `decisive` (column indices), a row dominates only where it is better (beyond the
    noise, with `errors`) in one of those columns (with `errors` and no `constraint_column`,
    across the constraint too); no worse in every column still holds. None: better in any.
    """
    values = np.nan_to_num(np.asarray(points, dtype=float), nan=np.inf)
    if errors is None:
        no_worse = (values[:, None, :] <= values[None, :, :]).all(axis=2)
        ahead = values[:, None, :] < values[None, :, :]  # [i, j, k]: i better than j on k
    else:
        spread = np.nan_to_num(np.asarray(errors, dtype=float), nan=0.0)
        below, above = (spread[..., 0], spread[..., 1]) if spread.ndim == 3 else (spread, spread)
        # [i, j, k]: the noise of "i lower than j on k" (i may be higher, j lower), and of
        # "i higher than j" (i may be lower, j higher)
        margin_lower = z * np.sqrt(above[:, None, :] ** 2 + below[None, :, :] ** 2)
        margin_higher = z * np.sqrt(below[:, None, :] ** 2 + above[None, :, :] ** 2)
        with np.errstate(invalid="ignore"):  # inf - inf: neither better nor worse
            difference = values[None, :, :] - values[:, None, :]  # [i, j]: j's less i's
        difference = np.nan_to_num(difference, nan=0.0)
        no_worse = (difference >= -margin_higher).all(axis=2)
        ahead = difference > margin_lower
    better = (ahead[:, :, list(decisive)] if decisive is not None else ahead).any(axis=2)
    if errors is None:  # across the constraint, whatever the values
        clearly_better = np.ones(no_worse.shape, dtype=bool)
    elif constraint_column is not None:
        clearly_better = ahead[:, :, constraint_column]
    else:
        clearly_better = better
    dominates = no_worse & better  # [i, j]: row i dominates row j
    if feasible is not None:
        meets = np.asarray(feasible, dtype=bool)
        if meets.shape != (len(values),):
            raise ValueError(
                f"`feasible` must have one entry per row, but got shape {meets.shape} for "
                f"{len(values)} rows."
            )
        same_side = meets[:, None] == meets[None, :]
        across = meets[:, None] & ~meets[None, :] & clearly_better
        dominates = (dominates & same_side) | across
    return [np.flatnonzero(dominates[:, j]).tolist() for j in range(len(values))]
