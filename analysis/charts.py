"""Charts of the trials: PNG for a quick look, one interactive HTML page to explore.

Every chart draws infeasible trials (out of memory, diverged, at chance) with their own
marker instead of dropping them, and the front apart from the rest.
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import moocore
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from matplotlib.lines import Line2D
from matplotlib.ticker import ScalarFormatter
from plotly.subplots import make_subplots

from analysis.ablations import BY_CONSTRUCTION, LEARNED_NOTHING, in_points, learned_nothing
from analysis.ablations import TOLD as TOLD_VERDICTS
from analysis.effects import trials_with
from analysis.load import (
    CONFIG_PREFIX,
    PREDICTED_PEAK_COLUMN,
    as_numbers,
    spans_decades,
    tick_values,
    varied_settings,
)
from analysis.pareto import finished_mask, lower_is_better_signs
from trainables.metrics import STATUS_OK, STATUS_OOM, STATUS_OOM_PREDICTED, unit_of
from trainables.techniques import memory_techniques_shown

FRONT, OTHER, INFEASIBLE, AT_CHANCE = "#ff7f0e", "#1f77b4", "#d62728", "#7f7f7f"  # tab: colours


def off_front_groups(
    frame: pd.DataFrame, feasible: np.ndarray
) -> list[tuple[np.ndarray, str, str]]:
    """The trials kept off the front, in the two kinds a reader must tell apart:
    (mask, colour, label) for those pruned (out of memory, diverged, stopped early) and for
    those that
    finished but learned nothing (or lack an objective's value)."""
    finished = finished_mask(frame)
    return [
        (~feasible & ~finished, INFEASIBLE, "pruned (oom, diverged, stopped early)"),
        (~feasible & finished, AT_CHANCE, "finished, kept off (at chance)"),
    ]


def front_staircase(points: np.ndarray) -> np.ndarray:
    """The 2D attainment line through a front of "lower is better" points
    (`analysis.pareto.objective_matrix`): between two front points it passes the corner
    made of their worse (larger) coordinates, so the line bounds what the front dominates."""
    ordered = points[np.argsort(points[:, 0], kind="stable")]
    line = [ordered[0]]
    for current, following in itertools.pairwise(ordered):
        line += [np.maximum(current, following), following]
    return np.array(line)


def axis_label(metric: str, direction: str | None = None) -> str:
    """`throughput (images/s, max)`: the name, its unit and which way is better."""
    notes = [note for note in (unit_of(metric), direction) if note]
    return f"{metric} ({', '.join(notes)})" if notes else metric


def _pairs(objectives: Mapping[str, str]) -> list[tuple[str, str]]:
    return list(itertools.combinations(objectives, 2))


def _finite(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    return frame[np.isfinite(frame[list(columns)].to_numpy(dtype=float)).all(axis=1)]


def _draw_at_edges(axis: plt.Axes, edges: list[tuple[np.ndarray, np.ndarray, str, str]]) -> None:
    """Trials with only x (or only y) known, as a tick on the bottom (or left) edge."""
    if not any(len(xs) or len(ys) for xs, ys, _, _ in edges):
        return
    x_low, y_low = axis.get_xlim()[0], axis.get_ylim()[0]
    for xs, ys, color, label in edges:
        if len(xs):
            axis.scatter(xs, [y_low] * len(xs), marker="v", c=color, clip_on=False, zorder=4,
                         label=f"{label}, only x known (on the edge)")  # fmt: skip
        if len(ys):
            axis.scatter([x_low] * len(ys), ys, marker="<", c=color, clip_on=False, zorder=4,
                         label=f"{label}, only y known (on the edge)")  # fmt: skip
    axis.set_xlim(left=x_low)
    axis.set_ylim(bottom=y_low)


def pairwise_front_chart(
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    feasible: np.ndarray,
    path: Path,
    title: str = "",
) -> Path:
    """One panel per pair of objectives: trials, the pair's front as a step line, the
    all-objective front highlighted, error bars when seeds were repeated."""
    pairs = _pairs(objectives) or [(next(iter(objectives)),) * 2]
    figure, axes = plt.subplots(1, len(pairs), figsize=(5.2 * len(pairs), 4.4), squeeze=False)
    on_front = frame["is_pareto"].fillna(False).to_numpy(dtype=bool)
    for axis, (x_name, y_name) in zip(axes[0], pairs, strict=True):
        pair = {x_name: objectives[x_name], y_name: objectives[y_name]}
        good = _finite(frame.loc[feasible], pair)
        axis.errorbar(
            good[x_name],
            good[y_name],
            xerr=good.get(f"{x_name}_std"),
            yerr=good.get(f"{y_name}_std"),
            fmt="o",
            ms=5,
            color=OTHER,
            alpha=0.6,
            label="trial",
        )
        front = _finite(frame.loc[feasible & on_front], pair)
        axis.scatter(front[x_name], front[y_name], s=70, c=FRONT, edgecolors="k", zorder=3,
                     label="Pareto front (all objectives)")  # fmt: skip
        line = pair_front_line(good, objectives, x_name, y_name)
        if line is not None:
            axis.plot(line[:, 0], line[:, 1], c=FRONT, lw=1.2, label=PAIR_FRONT)
        edges = []  # trials kept off with one of the pair's values: drawn at that axis' edge
        for mask, color, label in off_front_groups(frame, feasible):
            bad = _finite(frame.loc[mask], pair)
            if len(bad):
                axis.scatter(bad[x_name], bad[y_name], marker="x", c=color, label=label)
            values = frame.loc[mask, [x_name, y_name]].to_numpy(dtype=float)
            known = np.isfinite(values)
            only_x = values[known[:, 0] & ~known[:, 1], 0]
            only_y = values[~known[:, 0] & known[:, 1], 1]
            edges.append((only_x, only_y, color, label))
            missing = int((~known.any(axis=1)).sum())
            if missing:
                axis.plot([], [], "x", c=color, label=f"{missing} {label} without values")
        _draw_at_edges(axis, edges)
        axis.set_xlabel(axis_label(x_name, objectives[x_name]))
        axis.set_ylabel(axis_label(y_name, objectives[y_name]))
        axis.grid(alpha=0.3)
    legend_below(figure)
    figure.suptitle(title or "Trials and Pareto front")
    return _save(figure, path)


PAIR_FRONT = "front of this pair"


def pair_front_line(
    good: pd.DataFrame, objectives: Mapping[str, str], x_name: str, y_name: str
) -> np.ndarray | None:
    """The step line through the front of two objectives over the trials `good` (feasible,
    both values known), in the objectives' own directions; None without trials."""
    if not len(good):
        return None
    # lower is better (one objective alone is drawn against itself); undone to draw
    signs = np.concatenate(
        [lower_is_better_signs({name: objectives[name]}) for name in (x_name, y_name)]
    )
    points = good[[x_name, y_name]].to_numpy(dtype=float) * signs
    return front_staircase(points[moocore.is_nondominated(points)]) * signs


def legend_below(figure: plt.Figure) -> None:
    """One legend under the panels, of what any of them drew (each label once): a legend
    inside a panel covered its points wherever they filled it (2026-12-07)."""
    entries: dict[str, object] = {}
    for axis in figure.axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        figure.legend(list(entries.values()), list(entries), loc="outside lower center",
                      ncol=min(4, len(entries)), fontsize=7)  # fmt: skip


def front_3d_chart(
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    feasible: np.ndarray,
    path: Path,
    title: str = "",
) -> Path | None:
    """The first three objectives in 3D; None with fewer than three."""
    names = list(objectives)[:3]
    if len(names) < 3:
        return None
    figure = plt.figure(figsize=(7, 6))
    axis = figure.add_subplot(projection="3d")
    on_front = frame["is_pareto"].fillna(False).to_numpy(dtype=bool)
    groups = [
        (feasible & ~on_front, OTHER, "o", "trial"),
        (feasible & on_front, FRONT, "o", "Pareto front"),
        *((mask, color, "x", label) for mask, color, label in off_front_groups(frame, feasible)),
    ]
    for mask, color, marker, label in groups:
        shown = _finite(frame.loc[mask], names)
        if shown.empty:
            continue
        axis.scatter(*(shown[name] for name in names), c=color, marker=marker, s=40, label=label)
    for setter, name in zip(
        (axis.set_xlabel, axis.set_ylabel, axis.set_zlabel), names, strict=True
    ):
        setter(axis_label(name, objectives[name]), fontsize=8)
    if axis.collections:
        axis.legend(fontsize=7)
    else:  # e.g. time_to_target_s is inf for every trial that never reached the target
        axis.text2D(0.5, 0.5, "no trial has finite values of all three objectives",
                    transform=axis.transAxes, ha="center")  # fmt: skip
    figure.suptitle(title or "Pareto front in 3D")
    return _save(figure, path)


def _axis_values(column: pd.Series) -> tuple[np.ndarray, list[tuple[float, str]]]:
    """A param as positions in [0, 1] and its ticks (position, label): numbers on a linear
    or (spanning a decade or more) log scale, each distinct value labelled where there are
    few; anything else as evenly spaced categories."""
    numeric = as_numbers(column)
    if numeric is not None:
        low, high = float(numeric.min()), float(numeric.max())
        if spans_decades(numeric):

            def scale(v):
                return np.log10(np.asarray(v, dtype=float) / low) / np.log10(high / low)
        else:

            def scale(v):
                return (np.asarray(v, dtype=float) - low) / ((high - low) or 1.0)

        ticks = [(float(scale(value)), f"{value:.3g}") for value in tick_values(numeric)]
        return scale(numeric), ticks
    text = column.map(str)
    categories = sorted(text.unique())
    position = {value: i / max(1, len(categories) - 1) for i, value in enumerate(categories)}
    return text.map(position).to_numpy(dtype=float), [(position[c], c) for c in categories]


def _rank_colour(rank: float, worst: float) -> tuple[float, ...]:
    return plt.get_cmap("viridis")(0.15 + 0.75 * (rank - 1) / max(worst - 1, 1))


def parallel_chart(frame: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """Parallel coordinates of the sampled params, one line per trial, coloured by rank;
    trials kept off the front dashed, in their group's colour."""
    params = varied_settings(frame)
    if not params:
        return None
    figure, axis = plt.subplots(figsize=(max(6, 1.6 * len(params)), 4.6))
    positions = {param: _axis_values(frame[param]) for param in params}
    ranks = frame["pareto_rank"].to_numpy(dtype=float)
    worst = float(np.nanmax(ranks)) if np.isfinite(ranks).any() else 0.0
    lines = np.array([positions[param][0] for param in params]).T  # one row per trial
    x = range(len(params))
    for row, rank in zip(lines, ranks, strict=True):
        if rank == 0:
            axis.plot(x, row, c=FRONT, lw=2.2, alpha=0.9, zorder=3)
        elif rank > 0:
            axis.plot(x, row, c=_rank_colour(rank, worst), lw=1, alpha=0.7)
    legend = {"front": {"c": FRONT, "lw": 2.2}}
    if worst >= 1:
        legend["rank 1"] = {"c": _rank_colour(1, worst)}
    if worst >= 2:
        legend[f"rank {worst:.0f}"] = {"c": _rank_colour(worst, worst)}
    for mask, color, label in off_front_groups(frame, np.isfinite(ranks)):
        for row in lines[mask]:
            axis.plot(x, row, c=color, ls="--", lw=0.8, alpha=0.5)
        if mask.any():
            legend[label] = {"c": color, "ls": "--"}
    axis.set_xticks(range(len(params)), [p.removeprefix(CONFIG_PREFIX) for p in params],
                    rotation=20, fontsize=8)  # fmt: skip
    for i, param in enumerate(params):
        for y, label in positions[param][1]:
            axis.annotate(label, (i, y), fontsize=7, xytext=(3, 0), textcoords="offset points")
    axis.set_yticks([])
    for label, style in legend.items():
        axis.plot([], [], label=label, **style)
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=5)
    axis.set_title(title or "Sampled settings by Pareto rank", fontsize=10)
    return _save(figure, path)


def technique_labels(frame: pd.DataFrame, on_gpu: bool | None = None) -> pd.Series:
    """The techniques that change memory (the technique table's) each trial used, e.g.
    `AMP + checkpointing`, or `plain`; GPU-only ones not where the trials ran on CPUs."""
    on = {t.shown: trials_with(frame, t.name) for t in memory_techniques_shown(on_gpu)}
    labels = [" + ".join(shown for shown, mask in on.items() if mask[index]) or "plain"
              for index in frame.index]  # fmt: skip
    return pd.Series(labels, index=frame.index)


def batch_size_figure(
    frame: pd.DataFrame,
    on_gpu: bool | None = None,
    histories: pd.DataFrame | None = None,
    title: str = "",
) -> plt.Figure | None:
    """The chart a batch-size search needs most, over the physical batch each value was
    measured at (log scale; `batch_points`): peak memory per memory technique with the
    memory budget as a line and the trials that ran out of memory drawn where they failed
    (at what the step needed, or, predicted, at the budget); and throughput, the seed
    articles' central plot. A legend names only what is drawn. None without batch sizes."""
    batch_column = f"{CONFIG_PREFIX}batch_size"
    if batch_column not in frame or "peak_mem_mb" not in frame:
        return None
    points = batch_points(frame, histories, on_gpu)
    budget_column = f"{CONFIG_PREFIX}memory_budget_mb"
    budgets = pd.to_numeric(frame.get(budget_column, pd.Series(dtype=float)), errors="coerce")
    budgets = sorted(set(budgets.dropna().tolist()))
    figure, (memory, speed) = plt.subplots(1, 2, figsize=(11, 4.4))
    colours = plt.get_cmap("tab10")
    for i, label in enumerate(sorted(points["technique"].unique())):
        group = points[points["technique"] == label]
        memory.scatter(group["batch"], group["peak_mem_mb"], color=colours(i), label=label, s=30)
        fast = group[np.isfinite(group["throughput"].to_numpy(dtype=float))]
        if len(fast):
            speed.scatter(fast["batch"], fast["throughput"], color=colours(i), label=label, s=30)
    status = frame.get("status", pd.Series(STATUS_OK, index=frame.index))
    ceiling = budgets[-1] if budgets else np.nan
    oom = frame[status == STATUS_OOM]
    if len(oom):
        needed = oom["peak_mem_mb"].where(np.isfinite(oom["peak_mem_mb"]), ceiling)
        memory.scatter(_ran_with(oom), needed, marker="x", c=INFEASIBLE, s=50,
                       label="out of memory (what the step needed)")  # fmt: skip
    predicted = frame[status == STATUS_OOM_PREDICTED]
    if len(predicted) and budgets:
        # At the memory model's figure where it made one, else at the budget; never run,
        # so at the batch it would have started with.
        figure_of = pd.to_numeric(
            predicted.get(PREDICTED_PEAK_COLUMN, pd.Series(np.nan, index=predicted.index)),
            errors="coerce",
        )
        memory.scatter(predicted[batch_column], figure_of.fillna(ceiling), marker="^",
                       c=INFEASIBLE, s=50, label="predicted out of memory, not run")  # fmt: skip
    for budget in budgets:
        memory.axhline(budget, ls="--", c="k", lw=1)
        where = ("axes fraction", "data")
        memory.annotate(f"budget {budget:g} MiB", (0.01, budget), xycoords=where, fontsize=7,
                        va="bottom")  # fmt: skip
    for axis, metric in ((memory, "peak_mem_mb"), (speed, "throughput")):
        axis.set_xscale("log", base=2)
        axis.xaxis.set_major_formatter(ScalarFormatter())  # 64, not 2^6
        axis.set_xlabel("physical batch size (images per forward pass)")
        axis.set_ylabel(axis_label(metric))
        axis.grid(alpha=0.3)
    legend_below(figure)
    memory.set_title("Peak memory of a training step", fontsize=10)
    speed.set_title("Training throughput", fontsize=10)
    figure.suptitle(title or "Against the batch size")
    return figure


def batch_size_chart(
    frame: pd.DataFrame,
    path: Path,
    title: str = "",
    on_gpu: bool | None = None,
    histories: pd.DataFrame | None = None,
) -> Path | None:
    figure = batch_size_figure(frame, on_gpu, histories, title)
    return _save(figure, path) if figure is not None else None


def batch_points(
    frame: pd.DataFrame,
    histories: pd.DataFrame | None = None,
    on_gpu: bool | None = None,
) -> pd.DataFrame:
    """What the batch-size chart draws: one point per trial and physical batch, the batch its
    peak was measured at (a grown batch is a point of its own). From `histories` (every
    epoch), each batch's first epoch for memory (on CUDA it starts from an empty cache) and
    its epochs' mean throughput; without, each trial's last epoch. Columns `trial_id`,
    `batch`, `peak_mem_mb`, `throughput`, `technique` (the memory techniques it used)."""
    labels = technique_labels(frame, on_gpu).to_dict()
    trial_of = (
        {
            trial_id: index
            for index, trial_ids in frame["trial_id"].astype(str).items()
            for trial_id in trial_ids.split("+")
        }
        if "trial_id" in frame
        else {}
    )
    columns = ["trial_id", "batch", "peak_mem_mb", "throughput", "technique"]
    if histories is not None and not histories.empty and "physical_batch_size" in histories:
        known = histories[histories["trial_id"].astype(str).isin(trial_of)]
        known = known.dropna(subset=["physical_batch_size", "peak_mem_mb"])
        rows = []
        for (trial_id, batch), epochs in known.sort_values("epoch").groupby(
            ["trial_id", "physical_batch_size"], sort=False
        ):
            technique = labels[trial_of[str(trial_id)]]
            memory, speed = epochs["peak_mem_mb"].iloc[0], epochs["throughput"].mean()
            rows.append([str(trial_id), float(batch), float(memory), float(speed), technique])
        return pd.DataFrame(rows, columns=columns)
    status = frame.get("status", pd.Series(STATUS_OK, index=frame.index))
    ok = frame[status == STATUS_OK]
    return pd.DataFrame({
        "trial_id": ok.get("trial_id", pd.Series(ok.index, index=ok.index)).astype(str),
        "batch": _ran_with(ok),
        "peak_mem_mb": ok["peak_mem_mb"],
        "throughput": ok.get("throughput", pd.Series(np.nan, index=ok.index)),
        "technique": [labels[index] for index in ok.index],
    }, columns=columns)  # fmt: skip


def _ran_with(frame: pd.DataFrame) -> pd.Series:
    """The physical batch of each trial's last report (where an out-of-memory trial
    failed), else the batch it started with."""
    started = pd.to_numeric(frame[f"{CONFIG_PREFIX}batch_size"], errors="coerce")
    if "physical_batch_size" not in frame:
        return started
    return pd.to_numeric(frame["physical_batch_size"], errors="coerce").fillna(started)


TOLD, NOISE, SAME = "#2ca02c", "#7f7f7f", "#000000"  # told from the noise, within it, exact
EFFECT_KINDS = {True: "told from noise", False: "within the noise"}  # legend names
UNCHANGED = "unchanged in every run"  # a zero effect with a zero interval (the CPU's meter)


def effect_rows(effects: pd.DataFrame) -> pd.DataFrame:
    """`effects` with `row`, its row in the effect chart: the change, with its base trial
    where the ablations went around several."""
    several = effects["base"].nunique() > 1
    return effects.assign(row=effects["change"] + (" @ " + effects["base"] if several else ""))


def unchanged(effect: pd.Series) -> bool:
    """An effect measured as exactly none: a zero interval around zero."""
    return effect["verdict"] == "no change"


def words_instead_of_a_point(effect: pd.Series) -> tuple[str, str] | None:
    """(text, colour) written in an effect's row where it has no point to draw, or None:
    how the changed trial ended (out of memory, diverged: that is its effect), "learned
    nothing" (at chance, no accuracy to compare), "none by construction" (the same work
    per image) or why there is no value (a target never reached with the change, say), as
    the answer's sentence says it."""
    if np.isfinite(effect["effect"]):
        return None
    if effect["status"] != STATUS_OK:
        return effect["verdict"], INFEASIBLE
    if learned_nothing(effect["verdict"]):
        return LEARNED_NOTHING, INFEASIBLE
    if effect["verdict"] == BY_CONSTRUCTION:
        return "none by construction", NOISE
    return effect["verdict"], NOISE


def effect_figure(effects: pd.DataFrame, title: str = "") -> plt.Figure | None:
    """A panel per metric: each change's effect (points or % of the base config) with its
    95% interval, green where told from the seeds' noise, grey where not, black where the
    same in every run; a change whose trial ended (out of memory, diverged) says so in its
    row, one without a value says why (a target not always reached); a metric with
    no value at all has no panel (the table says why). None without ablations."""
    if effects.empty:
        return None
    drawn = effects["effect"].notna() | (effects["status"] != STATUS_OK)
    metrics = list(dict.fromkeys(effects.loc[drawn, "metric"]))
    if not metrics:
        return None
    effects = effect_rows(effects)
    rows = list(dict.fromkeys(effects["row"]))  # top to bottom
    figure, axes = plt.subplots(
        1, len(metrics), figsize=(2.8 * len(metrics) + 2.5, 0.32 * len(rows) + 1.8),
        sharey=True, squeeze=False,
    )  # fmt: skip
    for axis, metric in zip(axes[0], metrics, strict=True):
        chosen = effects[effects["metric"] == metric]
        for _, effect in chosen.iterrows():
            y = rows.index(effect["row"])
            words = words_instead_of_a_point(effect)
            if words is not None:
                # centred in the panel, which need not be centred on zero: nothing runs
                # past its edges
                axis.text(0.5, y, words[0], fontsize=7, ha="center", va="center",
                          color=words[1], transform=axis.get_yaxis_transform())  # fmt: skip
                continue
            if unchanged(effect):
                axis.plot([effect["effect"]], [y], "D", c=SAME, ms=4)
                continue
            colour = TOLD if effect["verdict"] in TOLD_VERDICTS else NOISE
            spread = None
            if np.isfinite(effect["low"]):
                spread = [[effect["effect"] - effect["low"]], [effect["high"] - effect["effect"]]]
            axis.errorbar([effect["effect"]], [y], xerr=spread, fmt="o", c=colour, ms=5,
                          capsize=3)  # fmt: skip
        axis.axvline(0, c="k", lw=0.8)
        unit = "points" if in_points(metric) else "% of the base"
        axis.set_xlabel(f"{metric} ({unit})", fontsize=9)
        axis.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(range(len(rows)), rows, fontsize=8)
    axes[0][0].set_ylim(len(rows) - 0.5, -0.5)  # the first change on top
    figure.suptitle(title or "What each change did to the ablated config (95% intervals)",
                    fontsize=10)  # fmt: skip
    # both kinds named whatever is drawn: a reader of a chart all grey learns what green means
    kinds = [Line2D([], [], marker="o", ls="", c=colour) for colour in (TOLD, NOISE)]
    names = list(EFFECT_KINDS.values())
    if (effects["verdict"] == "no change").any():  # as `unchanged` reads a row
        kinds.append(Line2D([], [], marker="D", ls="", c=SAME, ms=4))
        names.append(UNCHANGED)
    # below the panels' axis labels, never over them
    figure.legend(kinds, names, loc="outside lower center", ncol=len(names), fontsize=7)
    return figure


def effect_chart(effects: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    figure = effect_figure(effects, title)
    return _save(figure, path) if figure is not None else None


def interactive_effect_figure(effects: pd.DataFrame) -> go.Figure | None:
    """The effect chart for the report's page: a panel per metric, hover for the verdict;
    a row without a point says why in words, as the PNG's does."""
    if effects.empty:
        return None
    metrics = list(dict.fromkeys(effects["metric"]))
    effects = effect_rows(effects)
    rows = list(dict.fromkeys(effects["row"]))
    figure = make_subplots(rows=1, cols=len(metrics), shared_yaxes=True,
                           subplot_titles=[f"{m} ({'points' if in_points(m) else '%'})"
                                           for m in metrics])  # fmt: skip
    for column, metric in enumerate(metrics, start=1):
        chosen = effects[effects["metric"] == metric]
        for told in (True, False):
            kind = chosen[chosen["verdict"].isin(TOLD_VERDICTS) == told]
            figure.add_trace(go.Scatter(
                x=kind["effect"], y=kind["row"], mode="markers",
                marker={"color": TOLD if told else NOISE, "size": 8},
                error_x={"type": "data", "symmetric": False,
                         "array": kind["high"] - kind["effect"],
                         "arrayminus": kind["effect"] - kind["low"]},
                text=kind["verdict"], hovertemplate="%{y}: %{x:+.1f} (%{text})<extra></extra>",
                name=EFFECT_KINDS[told], showlegend=False, legendgroup=str(told),
            ), row=1, col=column)  # fmt: skip
        for _, effect in chosen.iterrows():
            words = words_instead_of_a_point(effect)
            if words is not None:
                axis = "" if column == 1 else column
                figure.add_annotation(
                    x=0.5, xref=f"x{axis} domain", y=effect["row"], yref=f"y{axis}",
                    text=words[0], showarrow=False, font={"size": 10, "color": words[1]},
                )  # fmt: skip
        figure.add_vline(x=0, line_width=1, row=1, col=column)
    for told in (True, False):  # the legend names both kinds, whatever is drawn
        figure.add_trace(go.Scatter(
            x=[None], y=[None], mode="markers", marker={"color": TOLD if told else NOISE,
            "size": 8}, name=EFFECT_KINDS[told], legendgroup=str(told),
        ), row=1, col=1)  # fmt: skip
    figure.update_yaxes(categoryorder="array", categoryarray=rows[::-1])
    figure.update_layout(
        title="Effect of each change on the ablated config (95% intervals)",
        height=max(320, 28 * len(rows) + 160),
    )
    return figure


def noise_scale_chart(
    histories: pd.DataFrame, labels: Mapping[str, str], path: Path, title: str = ""
) -> Path | None:
    """Per config (its seeds' trials in `labels`, trial id -> label): the effective batch it
    trained with (solid) against the gradient noise scale it measured (dashed, the batch its
    gradients could use), by epoch, on one log axis. None without a measured noise scale."""
    shown = histories[histories["trial_id"].isin(list(labels))]
    shown = shown.assign(config=shown["trial_id"].map(labels))
    measured = shown[np.isfinite(shown["noise_scale"].to_numpy(dtype=float))]
    measured = measured[measured["noise_scale"] > 0]
    if measured.empty:
        return None
    figure, axis = plt.subplots(figsize=(10, 4.8 + 0.3 * len(set(labels.values()))))
    colours = plt.get_cmap("tab10")
    for i, config in enumerate(dict.fromkeys(labels.values())):
        colour = colours(i % 10)
        trials = shown[shown["config"] == config]
        batch = trials.groupby("epoch")["effective_batch_size"].median()
        axis.step(batch.index, batch.to_numpy(), where="mid", c=colour, lw=2, label=config)
        noise = measured[measured["config"] == config]
        if len(noise):  # over seeds, a geometric mean: the scale spans decades
            logs = np.log(noise["noise_scale"].astype(float))
            geometric = np.exp(logs.groupby(noise["epoch"]).mean())
            axis.plot(geometric.index, geometric.to_numpy(), c=colour, ls="--", marker="o", ms=3)
    axis.plot([], [], c="k", lw=2, label="effective batch used (images)")
    axis.plot([], [], c="k", ls="--", marker="o", ms=3, label="gradient noise scale (images)")
    axis.set_yscale("log")
    axis.set_xlabel("epoch")
    axis.set_ylabel("images per optimizer step")
    # Below the axis, each config on its lines: a config's label is long, and nothing of
    # it may be cut off.
    handles, names = axis.get_legend_handles_labels()
    figure.legend(handles, [textwrap.fill(name, 120) for name in names], fontsize=7,
                  loc="outside lower center", ncol=1)  # fmt: skip
    axis.set_title(title or "The batch used against the batch the gradients could use", fontsize=10)
    return _save(figure, path)


def _save(figure: plt.Figure, path: Path) -> Path:
    # Constrained layout places titles and labels; the tight box takes in legends drawn
    # outside the axes, so nothing is cut off (tight_layout warns where it cannot fit a
    # figure, and cuts outside legends).
    figure.set_layout_engine("constrained")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path


def _hover(frame: pd.DataFrame) -> list[str]:
    """The text shown over a point: the trial, its status and its whole config."""
    params = [c for c in frame.columns if c.startswith(CONFIG_PREFIX)]
    texts = []
    for _, row in frame.iterrows():
        lines = [f"trial {row['trial_id']}: {row.get('status')}"]
        if isinstance(row.get("status_detail"), str) and row["status_detail"]:
            lines.append(row["status_detail"][:120])
        lines += [f"{p.removeprefix(CONFIG_PREFIX)} = {row[p]}" for p in params if _is_set(row[p])]
        texts.append("<br>".join(lines))
    return texts


def _is_set(value: object) -> bool:
    """A setting's value is there: not NaN/None (a list, e.g. gap_epochs, always is)."""
    return not pd.api.types.is_scalar(value) or pd.notna(value)


def _parcoords_axis(column: pd.Series) -> dict:
    """A Parcoords dimension showing the param's own values: numbers as they are (log10 with
    the values as tick labels where they span a decade), categories by name."""
    label = column.name.removeprefix(CONFIG_PREFIX)
    numeric = as_numbers(column)
    if numeric is not None:
        if spans_decades(numeric):
            ticks = tick_values(numeric)
            return {
                "label": f"{label} (log scale)",
                "values": np.log10(numeric),
                "tickvals": np.log10(ticks),
                "ticktext": [f"{t:.3g}" for t in ticks],
            }
        return {"label": label, "values": numeric}
    text = column.map(str)
    categories = sorted(text.unique())
    codes = text.map({value: i for i, value in enumerate(categories)})
    return {"label": label, "values": codes, "tickvals": list(range(len(categories))),
            "ticktext": categories}  # fmt: skip


def interactive_figures(
    frame: pd.DataFrame, objectives: Mapping[str, str], feasible: np.ndarray
) -> list[go.Figure]:
    """Plotly figures with each trial's config on hover: every pair, 3D, parallel coordinates."""
    hover = np.array(_hover(frame), dtype=object)
    on_front = frame["is_pareto"].fillna(False).to_numpy(dtype=bool)
    groups = [
        (feasible & ~on_front, OTHER, "circle", "trial"),
        (feasible & on_front, FRONT, "diamond", "Pareto front"),
        *((mask, color, "x", label) for mask, color, label in off_front_groups(frame, feasible)),
    ]
    groups = [group for group in groups if group[0].any()]
    figures = []
    for x_name, y_name in _pairs(objectives):
        figure = go.Figure()
        for mask, color, symbol, label in groups:
            figure.add_trace(go.Scatter(
                x=frame.loc[mask, x_name], y=frame.loc[mask, y_name], mode="markers", name=label,
                marker={"color": color, "symbol": symbol, "size": 9}, text=hover[mask],
                hovertemplate="%{text}<extra></extra>",
            ))  # fmt: skip
        pair = {x_name: objectives[x_name], y_name: objectives[y_name]}
        line = pair_front_line(_finite(frame.loc[feasible], pair), objectives, x_name, y_name)
        if line is not None:  # as the PNG draws it
            figure.add_trace(go.Scatter(
                x=line[:, 0], y=line[:, 1], mode="lines", name=PAIR_FRONT,
                line={"color": FRONT, "width": 1.5}, hoverinfo="skip",
            ))  # fmt: skip
        figure.update_layout(
            title=f"{x_name} ({objectives[x_name]}) vs {y_name} ({objectives[y_name]})",
            xaxis_title=axis_label(x_name),
            yaxis_title=axis_label(y_name),
        )
        figures.append(figure)
    names = list(objectives)[:3]
    if len(names) == 3:
        figure = go.Figure()
        for mask, color, symbol, label in groups:
            figure.add_trace(go.Scatter3d(
                x=frame.loc[mask, names[0]], y=frame.loc[mask, names[1]],
                z=frame.loc[mask, names[2]], mode="markers", name=label, text=hover[mask],
                marker={"color": color, "symbol": "x" if symbol == "x" else "circle", "size": 5},
                hovertemplate="%{text}<extra></extra>",
            ))  # fmt: skip
        # Room for the axis titles: plotly's default margins cut them off.
        figure.update_layout(
            title="Three objectives", height=650, margin={"l": 10, "r": 10, "t": 50, "b": 10},
            scene={f"{axis}axis": {"title": {"text": axis_label(name), "font": {"size": 11}}}
                   for axis, name in zip("xyz", names, strict=True)},
        )  # fmt: skip
        figures.append(figure)
    params = varied_settings(frame)
    if params:
        dimensions = [_parcoords_axis(frame[param]) for param in params]
        # The line colour is a category, not a scale: front, other feasible, kept off.
        ranks = frame["pareto_rank"]
        kind = np.where(ranks == 0, 2, np.where(ranks.notna(), 1, 0))
        steps = [INFEASIBLE, OTHER, FRONT]
        colorscale = [[edge, colour] for i, colour in enumerate(steps)
                      for edge in (i / 3, (i + 1) / 3)]  # fmt: skip
        figure = go.Figure(go.Parcoords(
            line={"color": kind, "colorscale": colorscale, "cmin": -0.5, "cmax": 2.5,
                  "showscale": True, "colorbar": {"tickvals": [0, 1, 2],
                  "ticktext": ["kept off", "other trial", "Pareto front"]}},
            dimensions=dimensions,
        ))  # fmt: skip
        figure.update_layout(title="Sampled settings, front and rest")
        figures.append(figure)
    return figures
