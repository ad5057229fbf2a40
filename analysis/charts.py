"""Charts of the trials: each pair of objectives, the front as a step line."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import moocore
import numpy as np
import pandas as pd

from analysis.pareto import feasible_mask, objective_matrix


def front_staircase(points: np.ndarray, directions: tuple[str, str]) -> np.ndarray:
    """The 2D attainment line through a front: between two front points it passes the
    corner made of their worse coordinates, so the line bounds what the front dominates."""
    ordered = points[np.argsort(points[:, 0], kind="stable")]
    line = [ordered[0]]
    for current, following in itertools.pairwise(ordered):
        corner = [
            min(a, b) if direction == "max" else max(a, b)
            for a, b, direction in zip(current, following, directions, strict=True)
        ]
        line += [np.array(corner), following]
    return np.array(line)


def pairwise_front_chart(
    frame: pd.DataFrame, objectives: Mapping[str, str], path: Path, title: str = ""
) -> Path:
    """One panel per pair of objectives: trials, their 2D front, infeasible trials as x."""
    names = list(objectives)
    pairs = list(itertools.combinations(names, 2)) or [(names[0], names[0])]
    figure, axes = plt.subplots(1, len(pairs), figsize=(5.2 * len(pairs), 4.4), squeeze=False)
    feasible = feasible_mask(frame, objectives)
    on_front = frame.get("is_pareto", pd.Series(False, index=frame.index)).to_numpy(dtype=bool)
    for axis, (x_name, y_name) in zip(axes[0], pairs, strict=True):
        pair = {x_name: objectives[x_name], y_name: objectives[y_name]}
        good = frame.loc[feasible]
        axis.scatter(good[x_name], good[y_name], s=28, c="tab:blue", alpha=0.6, label="trial")
        front = frame.loc[feasible & on_front]
        axis.scatter(
            front[x_name],
            front[y_name],
            s=60,
            c="tab:orange",
            edgecolors="k",
            label="Pareto front (all objectives)",
        )
        if len(good):
            nondominated = moocore.is_nondominated(objective_matrix(good, pair))
            points = good.loc[nondominated, [x_name, y_name]].to_numpy(dtype=float)
            line = front_staircase(points, (pair[x_name], pair[y_name]))
            axis.plot(line[:, 0], line[:, 1], c="tab:orange", lw=1.2, label="front of this pair")
        bad = frame.loc[~feasible, [x_name, y_name]].dropna()
        if len(bad):
            axis.scatter(bad[x_name], bad[y_name], marker="x", c="tab:red", label="infeasible")
        missing = int((~feasible).sum()) - len(bad)
        if missing:
            axis.plot([], [], "x", c="tab:red", label=f"{missing} infeasible, no values")
        axis.set_xlabel(f"{x_name} ({objectives[x_name]})")
        axis.set_ylabel(f"{y_name} ({objectives[y_name]})")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(title or "Trials and Pareto front")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
