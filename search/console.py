"""What the user reads in the terminal: the plan before the search, the table after it."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from analysis.flat import as_shown
from analysis.load import CONFIG_PREFIX
from analysis.report import header_legend, setting_headers
from analysis.same_work import pooled_note
from analysis.tracking_server import is_server
from search.ablation import KNEE_CANDIDATES, ablation_trials
from search.config import SearchConfig


def mlflow_ui_command(tracking_uri: str) -> str:
    if is_server(tracking_uri):
        return f"open {tracking_uri} in a browser"
    return f"mlflow ui --backend-store-uri {tracking_uri}"


def runs_link(tracking_uri: str, experiment_id: str, view: str | None = None) -> str:
    """The page of MLflow's UI that lists the search's runs: on the server, or on the local
    UI that `mlflow ui` starts (port 5000). MLflow 3 opens on its GenAI pages unless told
    the workflow is model training (its own switch, kept in the link's query); `view` is a
    view saved by `search.tracking.save_review_view`, opened with the page."""
    base = tracking_uri.rstrip("/") if is_server(tracking_uri) else "http://127.0.0.1:5000"
    link = f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
    return f"{link}&viewStateShareKey={quote(view)}" if view else link


def plan(config: SearchConfig, experiment_dir: Path, resume: bool) -> str:
    objectives = ", ".join(f"{name} ({way})" for name, way in config.objectives.items())
    sampled = ", ".join(config.space) or "nothing (fixed config)"
    resources = f"{config.resources.cpu:g} CPU + {config.resources.describe_gpu()}"
    capped = config.search.max_concurrent_trials
    if config.resources.packs_by_memory and capped is not None:
        # packing fits more trials to a card only where nothing else caps them
        resources += f" (at most {capped} at once: search.max_concurrent_trials)"
    return "\n".join(
        [
            f"{'Resuming' if resume else 'Search'} {experiment_dir.name}: "
            f"{config.search.num_samples} trials, {resources} each, "
            f"{config.search.sampler} sampler{lag_plan(config)}",
            f"  sampling:   {sampled}",
            *(f"  left out:   {key}: {why}" for key, why in config.left_out.items()),
            f"  objectives: {objectives}",
            f"  stopping:   {stopping_plan(config)}",
            f"  ablations:  {ablation_plan(config)}",
            f"  results:    {experiment_dir}",
            f"  MLflow:     {config.tracking.uri} (experiment {config.tracking.experiment!r})",
            f"  review:     {mlflow_ui_command(config.tracking.uri or '')}",
        ]
    )


def lag_plan(config: SearchConfig) -> str:
    """What the plan's first line says of `search.lag`, where the search samples."""
    lag = config.search.effective_lag
    if lag is None or not config.space:
        return ""
    return f", each trial suggested knowing the trials {lag} or more before it (search.lag)"


def stopping_plan(config: SearchConfig) -> str:
    """The early-stopping rule, said before the search starts."""
    stopping = config.search.early_stopping
    if stopping is None:
        return "none, every trial trains all its epochs (search.early_stopping: null)"
    ahead_on = stopping.effective_ahead_on(config.objectives)
    ahead = "on an objective" if ahead_on is None else f"on {' or '.join(ahead_on)}"
    rungs = ", ".join(map(str, stopping.rungs))
    return (
        f"at epochs {rungs} (at full learning rate), a trial stops where a peer is ahead "
        f"of it {ahead} beyond the noise and behind on nothing, unless it ranks in the "
        f"best {stopping.keep:.0%} there"
    )


def ablation_plan(config: SearchConfig) -> str:
    """What the ablations add, said before the search starts."""
    plan = config.search.ablation
    if plan is None:
        return "none (search.ablation: null)"
    around = "the knee trial" if plan.around == "knee" else "the front trials, knee first"
    trials = ablation_trials(plan, config.space, config.resources.gpu_share > 0)
    line = (
        f"up to {trials} more trials after the search, around {around} "
        f"({plan.seeds} of them on other seeds for the noise floor)"
    )
    if not plan.skip_seed_fragile:
        return line
    if plan.around == "front":
        return f"{line}; each floor first: a trial that learns on some seeds only is not ablated"
    more = (KNEE_CANDIDATES - 1) * plan.seeds
    return (
        f"{line}; its floor first: where its config learns on some seeds only, the next front "
        f"trial's floor, up to {more} more trials (search.ablation.skip_seed_fragile)"
    )


LEGEND_WIDTH = 100  # the short headers' legend, wrapped to a terminal's width


def summary_table(frame: pd.DataFrame, sampled: Sequence[str], objectives: Sequence[str]) -> str:
    """Trials ordered by Pareto rank: rank, status, sampled params, objectives, key metrics.
    The settings under the short headers of the progress table and the report (a dozen
    settings fit a terminal), what they stand for on the line under the table."""
    if frame.empty:
        return "No trial reported a result."
    key_metrics = ["best_val_acc", "throughput", "gen_gap", "peak_mem_mb"]
    params = setting_headers([f"{CONFIG_PREFIX}{key}" for key in sampled])
    columns = ["pareto_rank", "trial_id", "status", *params, *objectives, *key_metrics]
    columns = [c for c in dict.fromkeys(columns) if c in frame.columns]
    shown = frame[columns].rename(columns={**params, "pareto_rank": "rank"})
    shown["rank"] = [
        "-" if math.isnan(rank) else ("front" if rank == 0 else str(int(rank)))
        for rank in shown["rank"].astype(float)
    ]
    formatters = {column: as_shown for column in shown.columns}
    table = shown.to_string(index=False, na_rep="-", formatters=formatters)
    legend = header_legend([column for column in params if column in frame.columns],
                           intro="Short headers: ")  # fmt: skip
    pooled = pooled_note(frame)
    notes = [line for text in (legend, f"throughput: {pooled}" if pooled else "")
             for line in textwrap.wrap(text, LEGEND_WIDTH)]  # fmt: skip
    return "\n".join([table, *notes])
