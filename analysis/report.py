"""The report of a search: the front, what it means, charts; written to a folder and MLflow.

    python -m analysis.report --experiment NAME [--tracking-uri URI] [--run-name RUN]
                              [--out DIR] [--objectives throughput:max,best_val_acc:max]

The same report is written at the end of every `search.run`.
"""

from __future__ import annotations

import argparse
import base64
import html
import sys
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.io
import yaml
from mlflow.entities import Run, RunTag
from mlflow.tracking import MlflowClient

from analysis.ablations import (
    ablation_effects,
    answer,
    at_a_glance,
    effect_metrics,
    effect_table,
    in_points,
    inert_settings,
    passed_over,
    same_updates,
    split_ablations,
)
from analysis.arguments import ACCURACY
from analysis.charts import (
    batch_size_chart,
    effect_chart,
    front_3d_chart,
    interactive_effect_figure,
    interactive_figures,
    noise_scale_chart,
    pairwise_front_chart,
    parallel_chart,
)
from analysis.effects import started_trials, technique_effects
from analysis.flat import as_shown
from analysis.importance import inert_reasons, setting_importances
from analysis.load import (
    CONFIG_PREFIX,
    PREDICTED_PEAK_COLUMN,
    child_runs,
    find_parent_run,
    frame_from_mlflow,
    histories_from_mlflow,
    settings_text,
    varied_settings,
)
from analysis.pareto import (
    Bounds,
    declared_bounds,
    feasible_mask,
    front_of,
    hypervolume,
    knee_point,
    mark_front,
    told_apart,
)
from analysis.repeats import aggregate_repeats
from analysis.same_work import own_values, pool_same_work, pooled_note
from analysis.tables import select, trend_table
from analysis.tracking_server import TrackingUnavailable, check_reachable
from trainables.metrics import (
    ABLATION_OF,
    DEFAULT_MIN_ACCURACY,
    DEFAULT_OBJECTIVES,
    NUMERIC_METRICS,
    STATUS_OK,
    min_accuracy_for,
)
from trainables.techniques import column_of, idle_settings

NOISE_CHART_CONFIGS = 8  # configs drawn in the noise-scale chart, best-ranked first
DETAIL_WIDTH = 60  # characters a line of a trial's status detail in the markdown tables
RESULTS_DIR_TAG = "results_dir"  # the search's folder, where its report is written
NUM_CLASSES_TAG = "num_classes"  # the search run's classes, for its min accuracy
# the search run's tags: the images each accuracy is scored on (`split_size_tags`)
SPLIT_SIZE_TAG_PREFIX = "split_images."
# the search run's param: the GPU share its trials got (`resources.gpu` may say auto)
GPU_SHARE_PARAM = "resources.gpu_share"
# the search run's params: a sampled setting left out on the machine, and why
LEFT_OUT_PARAM_PREFIX = "left_out."


@dataclass(frozen=True)
class Report:
    frame: pd.DataFrame  # one row per config (seeds averaged), ranked, front first
    objectives: dict[str, str]
    bounds: Bounds
    hypervolume: float
    knee: object | None  # index into frame of the most balanced front trial
    effects: pd.DataFrame  # over the search's trials: matched pairs or a regression
    min_accuracy: float | None
    files: tuple[Path, ...]
    ablations: pd.DataFrame = field(default_factory=pd.DataFrame)  # the ablation trials
    # a row per ablation and metric (`analysis.ablations.ablation_effects`)
    ablation_effects: pd.DataFrame = field(default_factory=pd.DataFrame)
    not_ablated: dict[str, str] = field(default_factory=dict)  # setting -> why not
    # front trials whose floor ran and which were not ablated (`analysis.ablations.passed_over`)
    passed_over: tuple[str, ...] = ()
    importances: pd.DataFrame = field(default_factory=pd.DataFrame)  # fANOVA per objective
    importance_basis: str = ""
    importance_inert: tuple[str, ...] = ()  # what each "-" of the importances stands for
    # the images each accuracy was scored on, where the knee was chosen on evidence
    split_sizes: dict[str, int] | None = None

    @property
    def knee_noise(self) -> dict[str, float]:
        """Each objective's difference the evidence tells apart, as the knee was chosen on
        it (`analysis.pareto.told_apart`); empty where it was chosen by the front's range."""
        if self.split_sizes is None:
            return {}
        return told_apart(front_of(self.frame), self.objectives, self.split_sizes)

    def ablation_answer(self) -> list[str]:
        """What each change did around each ablated trial, in sentences (none without
        ablations)."""
        if self.ablation_effects.empty:
            return list(self.passed_over)
        return [
            *at_a_glance(self.ablation_effects, self.objectives),
            *self.passed_over,
            *answer(self.ablation_effects, self.not_ablated),
            *same_updates(self.ablations),
        ]

    def rank_of_trial(self) -> dict[str, float]:
        """Each trial's rank; repeats of a config share their config's rank."""
        ranks = {}
        for trial_ids, rank in zip(self.frame["trial_id"], self.frame["pareto_rank"], strict=True):
            for trial_id in str(trial_ids).split("+"):
                ranks[trial_id] = rank
        return ranks


def ranked(
    frame: pd.DataFrame, objectives: Mapping[str, str], min_accuracy: float | None
) -> tuple[pd.DataFrame, np.ndarray]:
    """(one row per config, seeds averaged, ranked with `is_pareto`; which rows are
    feasible): what the front, the knee and the ablations' bases are read from. Configs of
    the same work per image share one speed first (`analysis.same_work`)."""
    grouped = aggregate_repeats(pool_same_work(frame), objectives)
    marked = mark_front(grouped, objectives, min_accuracy).reset_index(drop=True)
    return marked, feasible_mask(marked, objectives, min_accuracy)


def build_report(
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    out_dir: Path,
    title: str = "",
    bounds: Bounds | None = None,
    min_accuracy: float | None = DEFAULT_MIN_ACCURACY,
    histories: pd.DataFrame | None = None,
    on_gpu: bool | None = None,
    left_out: Mapping[str, str] | None = None,
    split_sizes: Mapping[str, int] | None = None,
) -> Report:
    """Rank the trials, chart them, and write the report files into `out_dir`.

    `frame` holds the search's trials and its ablation trials (`analysis.ablations`): the
    ablations give the effects and stay off the front. `histories` (every epoch of every
    trial, `analysis.load.histories_from_*`) adds the batch used against the gradient
    noise scale and a point per grown batch in the batch-size chart. `on_gpu` False says
    the trials ran on CPUs (GPU-only techniques then measure nothing); `left_out`, the
    sampled settings the search left out on its machine and why (`search.devices`);
    `split_sizes`, the images each accuracy is scored on, so that the knee weighs an
    objective no finer than its noise (`analysis.pareto.balanced_front`)."""
    objectives = dict(objectives)
    for name in objectives:
        if name not in frame:
            frame = frame.assign(**{name: np.nan})
    for column in ("trial_id", "status"):  # none where no trial reported anything
        if column not in frame:
            frame = frame.assign(**{column: pd.Series(dtype=object)})
    search, ablations = split_ablations(frame)
    marked, feasible = ranked(search, objectives, min_accuracy)
    declared = declared_bounds(marked, objectives, bounds)
    effects = ablation_effects(search, ablations, effect_metrics(objectives), min_accuracy)
    # each trial's own speed counted once: a pooled figure repeated k times is no k readings
    measured = own_values(marked)

    def cannot_act(objective: str) -> dict[str, str]:
        return inert_settings(objective, on_gpu)

    importances, importance_basis = setting_importances(
        measured, objectives, feasible, inert=cannot_act
    )
    varied = {c.removeprefix(CONFIG_PREFIX) for c in varied_settings(search)}
    report = Report(
        frame=marked,
        objectives=objectives,
        bounds=declared,
        hypervolume=hypervolume(marked, objectives, declared, min_accuracy),
        knee=knee_point(marked, objectives, split_sizes),
        split_sizes=dict(split_sizes) if split_sizes is not None else None,
        effects=technique_effects(measured, objectives, feasible, on_gpu),
        min_accuracy=min_accuracy,
        files=(),
        ablations=ablations,
        ablation_effects=effects,
        passed_over=tuple(passed_over(search, ablations, min_accuracy)),
        not_ablated={
            **{k: why for k, why in idle_settings(on_gpu).items() if k in varied},
            **{k: f"not sampled on this machine: {why}" for k, why in (left_out or {}).items()},
        }
        if len(ablations)
        else {},
        importances=importances,
        importance_basis=importance_basis,
        importance_inert=tuple(inert_reasons(importances, cannot_act)) if len(importances) else (),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    title = title or "search"
    files = [out_dir / "trials.csv"]
    marked.to_csv(files[0], index=False)
    if len(ablations):
        files.append(out_dir / "ablations.csv")
        ablations.to_csv(files[-1], index=False)
        files.append(out_dir / "effects.csv")
        effects.to_csv(files[-1], index=False)
    if histories is not None:
        histories = histories[histories["trial_id"].astype(str).isin(_trial_ids(marked))]
    charts = [
        effect_chart(effects, out_dir / "effects.png", title),
        pairwise_front_chart(marked, objectives, feasible, out_dir / "pareto_front.png", title),
        front_3d_chart(marked, objectives, feasible, out_dir / "pareto_3d.png", title),
        parallel_chart(marked, out_dir / "parallel.png", title),
        batch_size_chart(marked, out_dir / "batch_size.png", title, on_gpu, histories),
    ]
    images = {}
    if charts[-1] is not None:
        images["Peak memory and throughput against the batch they were measured at"] = charts[-1]
    if histories is not None and not histories.empty:
        labels = config_labels(measured_noise(marked, histories), NOISE_CHART_CONFIGS)
        chart = noise_scale_chart(histories, labels, out_dir / "noise_scale.png", title)
        charts.append(chart)
        if chart is not None:
            images["The batch used against the gradient noise scale, by epoch"] = chart
    files += [chart for chart in charts if chart is not None]
    markdown = out_dir / "report.md"
    markdown.write_text(render_markdown(report, title, [c.name for c in charts if c]))
    page = out_dir / "report.html"
    page.write_text(render_html(report, title, feasible, images))
    files += [markdown, page]
    return replace(report, files=tuple(files))


def _trial_ids(frame: pd.DataFrame) -> set[str]:
    """Every trial of a ranked frame (a config run with several seeds lists them all)."""
    if "trial_id" not in frame:  # no trial at all
        return set()
    return {t for ids in frame["trial_id"].astype(str) for t in ids.split("+")}


def measured_noise(frame: pd.DataFrame, histories: pd.DataFrame) -> pd.DataFrame:
    """The rows of `frame` whose trials measured a gradient noise scale in some epoch: the
    noise chart draws the best-ranked of these (of the best-ranked configs alone, none had
    measured it in a default search, and the chart was left out without a word)."""
    scale = pd.to_numeric(histories.get("noise_scale", pd.Series(dtype=float)), errors="coerce")
    measured = set(histories.loc[scale > 0, "trial_id"].astype(str))
    ids = frame["trial_id"].astype(str).str.split("+")
    return frame[ids.map(lambda trial_ids: bool(measured.intersection(trial_ids)))]


def config_labels(frame: pd.DataFrame, limit: int) -> dict[str, str]:
    """Trial id -> its config's sampled settings, for the `limit` best-ranked configs."""
    params = varied_settings(frame)
    labels = {}
    for _, row in frame.sort_values("pareto_rank", na_position="last").head(limit).iterrows():
        label = settings_text(row, params) or "all"
        for trial_id in str(row["trial_id"]).split("+"):
            labels[trial_id] = label
    return labels


def _status_counts(frame: pd.DataFrame) -> str:
    if frame.empty:  # every trial failed before it reported (its actor never started)
        return "none reported a result"
    counts = frame["status"].value_counts()
    return ", ".join(f"{count} {status}" for status, count in counts.items())


def _front_table(report: Report) -> pd.DataFrame:
    """The front's trials: the objectives first, where a page too narrow for every
    sampled setting still shows them, then the settings."""
    params = varied_settings(report.frame)
    front = front_of(report.frame)
    columns = ["trial_id", *report.objectives]
    columns += [f"{name}_std" for name in report.objectives if f"{name}_std" in front]
    columns += params
    return as_shown_table(front[columns]).rename(columns=setting_headers(params))


def setting_headers(columns: list[str]) -> dict[str, str]:
    """Each setting's column -> its header in the report's tables: the short header the
    console's progress table gives it (`trainables.techniques.column_of`: "recompute" for
    activation_checkpointing), so that a table of a dozen settings fits a page."""
    headers = {column: column_of(column.removeprefix(CONFIG_PREFIX)) for column in columns}
    if len(set(headers.values())) < len(headers):  # two settings under one short header
        return {column: column.removeprefix(CONFIG_PREFIX) for column in columns}
    return headers


def header_legend(
    columns: list[str], intro: str = "Settings under the console's short headers: "
) -> str:
    """What the short headers of `columns` stand for, after `intro`; empty where none is
    short."""
    pairs = [(header, column.removeprefix(CONFIG_PREFIX))
             for column, header in setting_headers(columns).items()
             if header != column.removeprefix(CONFIG_PREFIX)]  # fmt: skip
    if not pairs:
        return ""
    return intro + ", ".join(f"{header} = {key}" for header, key in pairs) + "."


def as_shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """Every number as the console shows it (four significant digits): a table that fits a
    page, as text."""
    return table.map(as_shown)


def wrapped(text: object, width: int = DETAIL_WIDTH) -> str:
    """A long detail on several lines of a markdown table's cell."""
    return "<br>".join(textwrap.wrap(str(text), width)) if isinstance(text, str) else str(text)


def _infeasible_table(report: Report) -> pd.DataFrame:
    bad = report.frame[report.frame["pareto_rank"].isna()]
    if "status_detail" not in bad:  # MLflow keeps only non-empty tags
        bad = bad.assign(status_detail="")
    columns = ["trial_id", "status", "status_detail", *varied_settings(report.frame)]
    columns = [c for c in columns if c in bad]
    shown = bad[columns].copy()
    if report.min_accuracy is not None and "best_val_acc" in bad:
        at_chance = (bad["status"] == STATUS_OK) & (bad["best_val_acc"] < report.min_accuracy)
        shown.loc[at_chance, "status_detail"] = (
            f"best_val_acc below {report.min_accuracy:.3g}: learned nothing"
        )
    return as_shown_table(shown).rename(columns=setting_headers(columns))


def why_table_html(table: pd.DataFrame) -> str:
    """The kept-off trials as an HTML table: a row of each trial's id, status and settings,
    and under it a row of why it is off the front, across the table. A column of reasons
    beside a dozen settings made the table wider than a page."""
    settings = [column for column in table.columns if column != "status_detail"]
    head = "".join(f"<th>{html.escape(str(column))}</th>" for column in settings)
    rows = []
    for _, row in table.iterrows():
        cells = "".join(f"<td>{html.escape(str(row[column]))}</td>" for column in settings)
        rows.append(f"<tr>{cells}</tr>")
        if str(row["status_detail"]) not in ("", "-"):  # no detail kept (MLflow: "-")
            rows.append(
                f'<tr class="detail"><td colspan="{len(settings)}">'
                f"{html.escape(str(row['status_detail']))}</td></tr>"
            )
    body = "".join(rows)
    return f'<table class="why"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def default_out(tags: Mapping[str, str], run_name: str) -> Path:
    """Where a report goes without `--out`: beside the search it reports (its results
    folder's `report/`, where the search wrote its own) when that folder is on this
    machine; else `reports/<run name>` under the working folder."""
    results = Path(tags.get(RESULTS_DIR_TAG, ""))
    if tags.get(RESULTS_DIR_TAG) and results.is_dir():
        return results / "report"
    return Path("reports") / run_name


def memory_prediction_error(frame: pd.DataFrame) -> tuple[int, float] | None:
    """(trials, median relative error) of the searcher's predicted step peak against the
    peak the trials measured; None where nothing was predicted and measured. On a card the
    model predicts what the allocator reserves (`peak_reserved_mb`), above the tensors'
    `peak_mem_mb`, so that is what it is held to where a trial reported it. The
    prediction is for the batch a trial starts with: trials whose last epoch ran another
    (AdaBatch grew it) are left out."""
    if PREDICTED_PEAK_COLUMN not in frame or "peak_mem_mb" not in frame:
        return None
    predicted = pd.to_numeric(frame[PREDICTED_PEAK_COLUMN], errors="coerce")
    measured = pd.to_numeric(frame["peak_mem_mb"], errors="coerce")
    if "peak_reserved_mb" in frame:
        reserved = pd.to_numeric(frame["peak_reserved_mb"], errors="coerce")
        measured = reserved.where(reserved > 0, measured)
    both = predicted.notna() & measured.notna() & (measured > 0)
    started_with, ran_with = f"{CONFIG_PREFIX}batch_size", "physical_batch_size"
    if started_with in frame and ran_with in frame:
        both &= pd.to_numeric(frame[started_with], errors="coerce") == pd.to_numeric(
            frame[ran_with], errors="coerce"
        )
    if not both.any():
        return None
    errors = ((predicted[both] - measured[both]) / measured[both]).abs()
    return int(both.sum()), float(errors.median())


def _summary_lines(report: Report) -> list[str]:
    objectives = ", ".join(f"{name} ({way})" for name, way in report.objectives.items())
    bounds = ", ".join(f"{name} [{low:g}, {high:g}]" for name, (low, high) in report.bounds.items())
    count = f"Trials: {len(report.frame)} ({_status_counts(report.frame)})"
    if "seeds" in report.frame:
        count = (
            f"Configs: {len(report.frame)} ({_status_counts(report.frame)}), "
            f"{int(report.frame['seeds'].sum())} trials"
        )
    lines = [
        f"{count}; on the front: {int(report.frame['is_pareto'].sum())}.",
        f"Objectives: {objectives}.",
        f"Hypervolume: {report.hypervolume:.4f} of the normalised box (bounds {bounds}; "
        "reference point: the worst corner).",
    ]
    if report.min_accuracy is not None:
        lines.append(
            f"Trials below best_val_acc {report.min_accuracy:.3g} are kept off the front: at "
            "chance a model's gap is trivially small."
        )
    pooled = pooled_note(report.frame)
    if pooled:
        lines.append(f"Speed: {pooled}")
    beside = pd.to_numeric(report.frame.get("speed_outsiders", pd.Series(dtype=float)),
                           errors="coerce")  # fmt: skip
    if (beside > 0).any():
        lines.append(
            f"Speed: {int((beside > 0).sum())} trials were timed beside programs outside the "
            f"search on their card (up to {int(beside.max())}; speed_outsiders), which the "
            "device's gate cannot hold: their throughput holds those programs' use of the card."
        )
    accuracy = memory_prediction_error(report.frame)
    if accuracy is not None:
        count, error = accuracy
        lines.append(
            f"Memory model: the predicted step peak was {error:.1%} off the measured one "
            f"(median over the {count} started trials it predicted)."
        )
    if len(report.ablations):
        bases = report.ablations[f"{CONFIG_PREFIX}{ABLATION_OF}"].astype(str).unique()
        lines.append(
            f"Ablations: {len(report.ablations)} trials around trial {', '.join(bases)} "
            f"({_status_counts(report.ablations)}); kept off the front and never told to "
            "the sampler."
        )
    if report.knee is not None:
        knee = report.frame.loc[report.knee]
        values = ", ".join(f"{name} {knee[name]:.4g}" for name in report.objectives)
        settings = settings_text(knee, varied_settings(report.frame))
        weighed = ", ".join(f"{name} {noise:.0f}" if noise >= 100 else f"{name} {noise:.2g}"
                            for name, noise in report.knee_noise.items() if noise > 0)  # fmt: skip
        how = f"; each objective weighed no finer than its noise: {weighed}" if weighed else ""
        lines.append(
            f"Knee point (most balanced front trial{how}): {knee['trial_id']}: {values}; "
            f"{settings}."
        )
    return lines


ABLATION_INTRO = (
    "Ablations: the trial re-run with one sampled setting changed at a time, and unchanged on "
    "other seeds for the noise floor (search.ablation). Each effect holds for this config, "
    "this model, this data and this device: accuracies and gaps in points, the rest in % of "
    "the config's mean, with a 95% interval from its runs' spread; a change's throughput "
    "effect is its speed timed against the config's in alternation (A B A B, the machine's "
    "drift on both sides) with that ratio's interval, and none by construction where the "
    "change leaves a step's work alone (the learning rate, its warmup, the seed)."
)
REGRESSION_INTRO = (
    "Share of the front that uses it against its share of feasible trials, and its effect on "
    "each objective with a 95% interval (accuracies and gaps in points; speeds, memory and "
    "times in percent, from their logarithms: never below -100%): from configs that differ "
    "in it alone where the search has them, otherwise a regression that controls for the "
    "other settings the search varied; 'estimated from' says which, and on how many. Sound "
    "on large searches; the ablations above answer for the config they ran around."
)


def effects_shown(effects: pd.DataFrame) -> pd.DataFrame:
    """The technique table as read: each effect with its unit, as the ablations say theirs,
    shares to two decimals, "-" where there is no number."""

    def number(unit: str, sign: str = "+", places: int = 1) -> Callable[[object], str]:
        return lambda value: (
            f"{float(value):{sign}.{places}f}{unit}" if np.isfinite(float(value)) else "-"
        )

    shown = effects.copy()
    for column in [c for c in shown.columns if c.startswith("effect on ")]:
        unit = " points" if in_points(column.removeprefix("effect on ")) else "%"
        shown[column] = shown[column].map(number(unit))
    for column in ("share_of_feasible", "share_of_front"):
        shown[column] = shown[column].map(number("", sign="", places=2))
    return shown


def _measurable(effects: pd.DataFrame) -> bool:
    """Whether the search-wide estimates hold any number (on a small search none do)."""
    columns = [c for c in effects.columns if c.startswith("effect on ")]
    return bool(columns) and bool(effects[columns].notna().to_numpy().any())


def _importance_table(report: Report) -> pd.DataFrame:
    """Rounded, "-" where a setting cannot act on the objective."""
    table = report.importances.round(3)
    return table.astype(object).where(table.notna(), "-")


# What fANOVA's numbers are and are not, said under its table.
IMPORTANCE_CAVEAT = (
    "It ranks the settings by how much of each objective's spread over the search's trials "
    "they explain; it measures no effect (the ablations do)."
)


def _importance_notes(report: Report) -> list[str]:
    """The caveat, then what the "-" stand for."""
    if not report.importance_inert:
        return [IMPORTANCE_CAVEAT]
    inert = "; ".join(report.importance_inert)
    return [IMPORTANCE_CAVEAT, f'"-" where a setting cannot act on the objective: {inert}.']


def render_markdown(report: Report, title: str, charts: list[str]) -> str:
    parts = [f"# {title}: speed / accuracy / generalization", ""]
    parts += [f"- {line}" for line in _summary_lines(report)]
    if not report.ablation_effects.empty:
        parts += ["", "## What each setting does here (ablations)", "", ABLATION_INTRO, ""]
        parts += [f"- {line}" for line in report.ablation_answer()]
        parts += ["", effect_table(report.ablation_effects).to_markdown(index=False), ""]
        parts += ["![effects](effects.png)"]
    parts += ["", "## The front", "", _front_table(report).to_markdown(index=False), ""]
    legend = header_legend(varied_settings(report.frame))
    parts += [legend, ""] if legend else []
    if not report.importances.empty:
        parts += [
            "## How much each setting explains (over the search's trials)",
            "",
            f"Importance per objective, each column summing to 1: {report.importance_basis}.",
            "",
            _importance_table(report).to_markdown(index=False),
            "",
            *(f"{line}  " for line in _importance_notes(report)),
            "",
        ]
    if not report.effects.empty:
        parts += ["## What each technique does over the search's trials", ""]
        if _measurable(report.effects):
            table = effects_shown(report.effects).to_markdown(index=False)
            parts += [REGRESSION_INTRO, "", table, ""]
        else:
            parts += [_not_measured_line(report), ""]
    infeasible = _infeasible_table(report)
    if not infeasible.empty:
        infeasible = infeasible.assign(status_detail=infeasible["status_detail"].map(wrapped))
        parts += ["## Kept off the front", "", infeasible.to_markdown(index=False), ""]
        parts += [legend, ""] if legend else []
    parts += ["## Charts", ""] + [f"![{name}]({name})" for name in charts]
    return "\n".join(parts) + "\n"


def _not_measured_line(report: Report) -> str:
    """Why no technique's effect over the search's trials could be estimated, each reason
    with the techniques it holds for."""
    reasons = report.effects["estimated from"].str.removeprefix("not measurable here: ")
    techniques: dict[str, list[str]] = {}
    for technique, reason in zip(report.effects["technique"], reasons, strict=True):
        techniques.setdefault(reason, []).append(str(technique))
    said = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in techniques.items())
    return (
        f"Not measurable over {len(started_trials(report.frame))} configs ({said}): "
        "too few trials for the settings that vary"
        + ("; the ablations above answer instead." if not report.ablation_effects.empty else ".")
    )


def render_html(
    report: Report, title: str, feasible: np.ndarray, images: Mapping[str, Path] | None = None
) -> str:
    """The report page; `images` (heading -> PNG) follow the charts, inside the page: MLflow
    shows an attached page in a sandboxed frame where a link to a file beside it loads
    nothing (2026-12-07), and a page saved alone keeps its charts."""
    effect_figure = interactive_effect_figure(report.ablation_effects)
    figures = interactive_figures(report.frame, report.objectives, feasible)
    if effect_figure is not None:
        figures = [effect_figure, *figures]
    plots = [
        plotly.io.to_html(
            figure,
            full_html=False,
            include_plotlyjs="inline" if i == 0 else False,
            div_id="effect-chart" if figure is effect_figure else None,
        )
        for i, figure in enumerate(figures)
    ]
    summary = "".join(f"<li>{html.escape(line)}</li>" for line in _summary_lines(report))
    sections = [
        f"<h1>{html.escape(title)}: speed / accuracy / generalization</h1><ul>{summary}</ul>"
    ]
    if effect_figure is not None:
        lines = "".join(f"<li>{html.escape(line)}</li>" for line in report.ablation_answer())
        sections.append(
            "<h2>What each setting does here (ablations)</h2>"
            f"<p>{html.escape(ABLATION_INTRO)}</p><ul>{lines}</ul>"
            + plots.pop(0)
            + effect_table(report.ablation_effects).to_html(index=False)
        )
    legend = header_legend(varied_settings(report.frame))
    sections.append(
        "<h2>The front</h2>"
        + _front_table(report).to_html(index=False)
        + (f"<p>{html.escape(legend)}</p>" if legend else "")
    )
    if not report.importances.empty:
        sections.append(
            "<h2>How much each setting explains (over the search's trials)</h2>"
            f"<p>Importance per objective, each column summing to 1: "
            f"{html.escape(report.importance_basis)}.</p>"
            + _importance_table(report).to_html(index=False)
            + "".join(f"<p>{html.escape(line)}</p>" for line in _importance_notes(report))
        )
    if not report.effects.empty:
        body = (
            f"<p>{html.escape(REGRESSION_INTRO)}</p>"
            + effects_shown(report.effects).to_html(index=False)
            if _measurable(report.effects)
            else f"<p>{html.escape(_not_measured_line(report))}</p>"
        )
        sections.append("<h2>What each technique does over the search's trials</h2>" + body)
    infeasible = _infeasible_table(report)
    if not infeasible.empty:
        sections.append(
            "<h2>Kept off the front</h2>"
            + why_table_html(infeasible)
            + (f"<p>{html.escape(legend)}</p>" if legend else "")
        )
    sections.append("<h2>Charts (hover a point for its config)</h2>" + "".join(plots))
    for heading, path in (images or {}).items():
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        sections.append(
            f"<h2>{html.escape(heading)}</h2>"
            f'<img src="data:image/png;base64,{data}" alt="{html.escape(path.name)}">'
        )
    return PAGE.format(title=html.escape(title), body="".join(sections))


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
td, th {{ padding: 2px 8px; border: 1px solid #ccc; }}
table.why tr.detail td {{ color: #333; padding-bottom: 6px; }}  /* why it is off the front */
</style></head>
<body>{body}</body></html>
"""


def publish(client: MlflowClient, parent_run_id: str, report: Report) -> None:
    """Attach the report to the search's run and tag every trial's run with its rank, so
    that `tags.is_pareto = 'true'` filters the front in the MLflow UI."""
    for path in report.files:
        client.log_artifact(parent_run_id, str(path), artifact_path="report")
    client.log_metric(parent_run_id, "hypervolume", report.hypervolume)
    ranks = report.rank_of_trial()
    parent = client.get_run(parent_run_id)
    for run in child_runs(client, parent):
        rank = ranks.get(run.data.tags.get("trial_id", ""), np.nan)
        tags = [
            RunTag("pareto_rank", "-" if np.isnan(rank) else str(int(rank))),
            RunTag("is_pareto", "true" if rank == 0 else "false"),
        ]
        client.log_batch(run.info.run_id, tags=tags)


def objectives_from_parent(params: Mapping[str, str]) -> dict[str, str]:
    """The objectives a search ran with, read back from its parent run's params."""
    return _params_under(params, "search.objectives.") or dict(DEFAULT_OBJECTIVES)


def bounds_from_parent(params: Mapping[str, str]) -> Bounds:
    """The hypervolume bounds a search declared (`search.hypervolume_bounds`), if any."""
    declared = _params_under(params, "search.hypervolume_bounds.")
    return {name: tuple(map(float, yaml.safe_load(text))) for name, text in declared.items()}


def _params_under(params: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The params of one config section, e.g. search.objectives.*, by their last key."""
    return {k.removeprefix(prefix): v for k, v in params.items() if k.startswith(prefix)}


def min_accuracy_from_parent(tags: Mapping[str, str]) -> float:
    """Chance + 5 points for the search's classes (its `num_classes` tag); searches from
    before the tag were of cats vs dogs."""
    try:
        return min_accuracy_for(int(tags[NUM_CLASSES_TAG]))
    except (KeyError, ValueError):
        return DEFAULT_MIN_ACCURACY


def split_size_tags(split_sizes: Mapping[str, int]) -> dict[str, str]:
    """The search run's tags that say how many images each accuracy was scored on ("val",
    "test", "train_eval"), counted by the search from its data."""
    return {f"{SPLIT_SIZE_TAG_PREFIX}{split}": str(images) for split, images in split_sizes.items()}


def split_sizes_from_parent(tags: Mapping[str, str]) -> dict[str, int] | None:
    """The images each accuracy of the search's trials was scored on, from its run's tags
    (`split_size_tags`); None for a search from before them (2026-12-06), whose knee is then
    chosen by the front's range alone."""
    sizes = {
        key.removeprefix(SPLIT_SIZE_TAG_PREFIX): value
        for key, value in tags.items()
        if key.startswith(SPLIT_SIZE_TAG_PREFIX)
    }
    try:
        return {split: int(sizes[split]) for split in ("val", "test", "train_eval")}
    except (KeyError, ValueError):
        return None


def gpu_from_parent(params: Mapping[str, str]) -> bool | None:
    """Whether the search's trials had GPUs (the share they got; before `auto`, the
    `resources.gpu` param); None: unknown."""
    try:
        return float(params.get(GPU_SHARE_PARAM, params["resources.gpu"])) > 0
    except (KeyError, ValueError):
        return None


def left_out_from_parent(params: Mapping[str, str]) -> dict[str, str]:
    """The sampled settings the search left out on its machine, and why (none before
    2026-11-27's `search.amp_probe`)."""
    return {
        key.removeprefix(LEFT_OUT_PARAM_PREFIX): why
        for key, why in params.items()
        if key.startswith(LEFT_OUT_PARAM_PREFIX)
    }


def parse_objectives(text: str) -> dict[str, str]:
    objectives = {}
    for item in text.split(","):
        name, _, direction = item.strip().partition(":")
        if direction not in ("max", "min"):
            raise ValueError(f"objective {item!r} must look like name:max or name:min")
        objectives[name] = direction
    return objectives


def check_store_exists(tracking_uri: str) -> None:
    """Refuse a SQLite store that is not there: MLflow would make an empty one, and the
    report would then say the experiment is missing."""
    if tracking_uri.startswith("sqlite:///"):
        database = Path(tracking_uri.split(":///", 1)[1])
        if not database.is_file():
            raise LookupError(
                f"no MLflow store at {database}: run the report where the search ran (it "
                "writes mlflow.db there), or pass --tracking-uri"
            )


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.report", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--experiment", required=True, help="MLflow experiment of the search")
    parser.add_argument(
        "--tracking-uri",
        default=f"sqlite:///{Path.cwd() / 'mlflow.db'}",
        help="MLflow store or server (default: mlflow.db here, where search.run writes)",
    )
    parser.add_argument("--run-name", help="the search's run (default: the newest with trials)")
    parser.add_argument(
        "--out",
        help="folder for the report (default: the search's results folder's report/ where it "
        "is on this machine, else reports/<run name>)",
    )
    parser.add_argument("--objectives", help="e.g. throughput:max,best_val_acc:max,gen_gap:min")
    parser.add_argument(
        "--min-accuracy",
        type=ACCURACY,
        help="trials with a lower best_val_acc stay off the front (default: chance + 0.05 "
        f"for the search's classes, {DEFAULT_MIN_ACCURACY} for two)",
    )
    parser.add_argument(
        "--trend",
        action="append",
        default=[],
        metavar="ROWS[,COLUMNS]",
        help="also print --trend-value by one or two settings, e.g. batch_size,optimizer",
    )
    parser.add_argument(
        "--trend-value",
        default="best_val_acc",
        help="metric of --trend tables (default: best_val_acc)",
    )
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="--trend tables over the trials with this setting only, e.g. augment=false",
    )
    return parser


def open_search(args: argparse.Namespace) -> tuple[MlflowClient, Run, dict[str, str]]:
    """The store, the search's parent run and its objectives; `ReportError` with the
    message a user reads where any of them cannot be had."""
    try:
        check_reachable(args.tracking_uri)
    except TrackingUnavailable as error:
        raise ReportError(str(error)) from None
    try:
        check_store_exists(args.tracking_uri)
        client = MlflowClient(args.tracking_uri)
        parent = find_parent_run(client, args.experiment, args.run_name)
        objectives = (
            parse_objectives(args.objectives)
            if args.objectives
            else objectives_from_parent(parent.data.params)
        )
    except (LookupError, ValueError) as error:
        raise ReportError(str(error)) from error
    except Exception as error:  # the store's: MLflow's, SQLAlchemy's, a database driver's
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise ReportError(
            f"cannot read the MLflow store at {args.tracking_uri} "
            f"({type(error).__name__}: {first_line})"
        ) from error
    return client, parent, objectives


class ReportError(Exception):
    """What stops `python -m analysis.report`, as its user reads it."""


def measured_objectives(frame: pd.DataFrame, objectives: Mapping[str, str]) -> None:
    """`ReportError` for an objective (`--objectives`) the search's trials do not report."""
    unknown = [name for name in objectives if name not in frame]
    if unknown:
        raise ReportError(
            f"--objectives: {', '.join(map(repr, unknown))} is no metric of the search's "
            f"trials (known: {', '.join(sorted(set(frame.columns) & set(NUMERIC_METRICS)))})"
        )


def trend_tables(
    frame: pd.DataFrame, trends: list[str], value: str, where: list[str]
) -> list[tuple[str, pd.DataFrame]]:
    """Each `--trend` spec with its table of `value` over the search's trials `where`
    selects (not its ablations: a noise-floor run or a changed knee is no sample of the
    space); `ReportError` naming the option for a mistake, found before a report is written."""
    frame, _ = split_ablations(frame)
    for condition in where:
        if "=" not in condition:
            raise ReportError(f"--where {condition!r} must look like SETTING=VALUE")
    try:
        selected = select(frame, where)
    except KeyError as error:
        raise ReportError(f"--where: {error.args[0]}") from None
    if where and selected.empty:
        raise ReportError(f"--where {' '.join(where)}: no trial of the search matches")
    if trends and value not in frame:
        raise ReportError(f"--trend-value {value!r} is no metric of the search's trials")
    tables = []
    for spec in trends:
        if spec.count(",") > 1:
            raise ReportError(f"--trend {spec!r}: one or two settings, ROWS[,COLUMNS]")
        try:
            tables.append((spec, trend_table(selected, value, *spec.split(",", 1))))
        except KeyError as error:
            raise ReportError(f"--trend {spec!r}: {error.args[0]}") from None
    return tables


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    try:
        client, parent, objectives = open_search(args)
        frame = frame_from_mlflow(client, parent)
        if frame.empty:
            raise ReportError(f"search run {parent.info.run_name!r} has no trial runs")
        if args.objectives:  # the search's own are what its trials report
            measured_objectives(frame, objectives)
        trends = trend_tables(frame, args.trend, args.trend_value, args.where)
        out = Path(args.out) if args.out else default_out(parent.data.tags, parent.info.run_name)
        if out.exists() and not out.is_dir():
            raise ReportError(f"--out {out} is a file; the report needs a folder")
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    report = build_report(
        frame,
        objectives,
        out,
        parent.info.run_name,
        bounds=bounds_from_parent(parent.data.params) or None,
        min_accuracy=(
            args.min_accuracy
            if args.min_accuracy is not None
            else min_accuracy_from_parent(parent.data.tags)
        ),
        histories=histories_from_mlflow(client, parent),
        on_gpu=gpu_from_parent(parent.data.params),
        left_out=left_out_from_parent(parent.data.params),
        split_sizes=split_sizes_from_parent(parent.data.tags),
    )
    publish(client, parent.info.run_id, report)
    for line in [*_summary_lines(report), *report.ablation_answer()]:
        print(line)
    where = f" where {', '.join(args.where)}" if args.where else ""
    for spec, table in trends:
        by = spec.replace(",", " and ")
        print(f"\n{args.trend_value} by {by}{where} (mean ± std over seeds):")
        print(table.to_markdown())
    print(f"Report: {out / 'report.html'} (and report.md); attached to run {parent.info.run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
