"""Results of a search -> one pandas DataFrame, one row per trial.

Columns: `trial_id`, `config.<key>` for every trainable key (nested keys joined with dots,
as MLflow keeps params apart from metrics: `lr` is the metric, `config.lr` the setting),
the metric schema's names with each trial's last reported values, `status` and
`status_detail`. Two sources give the same frame: MLflow (any tracking URI) and a Ray
Tune results folder.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from analysis.flat import as_written, flatten
from trainables.metrics import (
    ASKED,
    PREDICTED_PEAK,
    SEARCH_NOTES,
    STATUS_ERROR,
    STATUS_OK,
    STATUS_STOPPED_EARLY,
    UNMEASURED_TAG,
    UNTIL_TARGET_METRICS,
)
from trainables.settings import under_new_names

CONFIG_PREFIX = "config."
# Config keys that are not settings of a trial: the repeat's seed and the search's notes.
NOT_SETTINGS = frozenset({"seed", *SEARCH_NOTES})
PREDICTED_PEAK_COLUMN = f"{CONFIG_PREFIX}{PREDICTED_PEAK}"  # the searcher's memory model
# The notes that are text whatever they look like: a trial id of eight digits (one in 43 of
# Tune's) is a trial id, not a number, in `ablation_of` and `repeat_of`.
TEXT_NOTES = SEARCH_NOTES - {PREDICTED_PEAK, ASKED}
PARENT_TAG = "mlflow.parentRunId"
# The heading Tune writes in a trial's error.txt for each of its failures.
_FAILURE = re.compile(r"^Failure # \d+ \(occurred at (\S+)\)", re.M)
# Keys every result carries that are not part of the metric schema (Tune's bookkeeping).
_TEXT_FIELDS = ("status", "status_detail")


def trial_row(
    trial_id: str,
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    error: str | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = {"trial_id": trial_id}
    config = under_new_names(config)[0]  # a search run before a setting was renamed
    row.update({f"{CONFIG_PREFIX}{key}": value for key, value in flatten("", config).items()})
    row.update(metrics)
    if error is not None:
        row["status"] = STATUS_ERROR
        row["status_detail"] = error
    row.setdefault("status", STATUS_ERROR)
    return row


def setting_columns(frame: pd.DataFrame) -> list[str]:
    """The `config.` columns that are settings of a trial (not the seed or the search's
    notes): trials equal in all of them are repeats of one config."""
    return [
        column
        for column in frame.columns
        if column.startswith(CONFIG_PREFIX)
        and column.removeprefix(CONFIG_PREFIX) not in NOT_SETTINGS
    ]


def settings_key(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """One text per row of its values in `columns`: rows equal in all of them share it.
    As text because a setting may be a list (gap_epochs, recomputed_modules), which pandas
    can neither group by nor compare by value."""
    return frame[list(columns)].map(repr).agg("|".join, axis=1)


def settings_text(row: Mapping[str, Any], columns: Sequence[str]) -> str:
    """A trial's `config.` columns as its user wrote them: "batch_size=32, lr=0.002"."""
    return ", ".join(
        f"{column.removeprefix(CONFIG_PREFIX)}={as_written(row[column])}" for column in columns
    )


def varied_settings(frame: pd.DataFrame) -> list[str]:
    """The settings that differ between the trials: what the search sampled."""
    return [column for column in setting_columns(frame) if frame[column].map(str).nunique() > 1]


def frame_from_tune(experiment_dir: Path, metric_names: tuple[str, ...]) -> pd.DataFrame:
    """One row per trial folder of a Ray Tune experiment: params.json and the last line of
    result.json; a trial with an error.txt is an `error` row."""
    rows = []
    for params in sorted(Path(experiment_dir).glob("*/params.json")):
        trial_dir = params.parent
        config = json.loads(params.read_text())
        last = _last_result(trial_dir / "result.json")
        error_file = trial_dir / "error.txt"
        error_text = error_file.read_text() if error_file.exists() else ""
        error = _last_line(error_text) if error_text and _ended_in_error(error_text, last) else None
        trial_id = str(last.get("trial_id") or trial_dir.name.removeprefix("trial_"))
        metrics = {name: last[name] for name in metric_names if name in last}
        rows.append(trial_row(trial_id, config, metrics, error))
    return pd.DataFrame(rows)


def trial_seconds(experiment_dir: Path) -> dict[str, float]:
    """Wall seconds each trial of a Tune results folder ran (its last `time_total_s`)."""
    seconds = {}
    for result in Path(experiment_dir).glob("*/result.json"):
        last = _last_result(result)
        if "time_total_s" in last:
            seconds[_trial_id(last, result)] = float(last["time_total_s"])
    return seconds


def trial_spans(experiment_dir: Path) -> dict[str, tuple[float, float]]:
    """When each trial of a Tune results folder started and when it last reported, in
    seconds since the epoch: its last result's `timestamp` less its `time_total_s`, and
    that timestamp (whole seconds, as Tune writes it)."""
    spans = {}
    for result in Path(experiment_dir).glob("*/result.json"):
        last = _last_result(result)
        if "time_total_s" in last and "timestamp" in last:
            end = float(last["timestamp"])
            spans[_trial_id(last, result)] = (end - float(last["time_total_s"]), end)
    return spans


def _trial_id(last: dict[str, Any], result: Path) -> str:
    return str(last.get("trial_id") or result.parent.name.removeprefix("trial_"))


def as_numbers(column: pd.Series) -> pd.Series | None:
    """A setting's values as numbers, or None when it is a category (text, a switch)."""
    numbers = pd.to_numeric(column, errors="coerce")
    if numbers.isna().any() or column.map(type).isin([bool, str]).any():
        return None
    return numbers


def spans_decades(numbers: pd.Series) -> bool:
    """Positive numbers a decade or more apart: drawn and modelled on a log scale."""
    return bool(numbers.min() > 0 and numbers.max() / numbers.min() >= 10)


MAX_TICKS = 8  # a numeric axis with more distinct values labels its ends and middle


def tick_values(numbers: pd.Series) -> list[float]:
    """The values an axis of `numbers` labels: each distinct one where there are few."""
    distinct = sorted(set(numbers.tolist()))
    if len(distinct) > MAX_TICKS:
        return [float(numbers.min()), float(numbers.median()), float(numbers.max())]
    return distinct


# What the per-epoch charts draw: the noise scale against the batch, and memory and
# throughput at each physical batch a trial trained with.
HISTORY_METRICS = (
    "effective_batch_size",
    "noise_scale",
    "physical_batch_size",
    "peak_mem_mb",
    "throughput",
)


# Statuses of a report that is an epoch trained: an early-stopped trial's last report is
# its rung's epoch, marked when the scheduler stopped it.
TRAINED_EPOCH = (STATUS_OK, STATUS_STOPPED_EARLY)


def histories_from_tune(
    experiment_dir: Path, names: tuple[str, ...] = HISTORY_METRICS
) -> pd.DataFrame:
    """Every epoch of every trial folder: columns `trial_id`, `epoch` and `names`."""
    rows = []
    for result in sorted(Path(experiment_dir).glob("*/result.json")):
        for line in result.read_text().splitlines():
            if not line.strip():
                continue
            values = json.loads(line)
            if "epoch" not in values or values.get("status") not in TRAINED_EPOCH:
                continue  # a pruned trial's last report repeats its last good epoch
            trial_id = str(values.get("trial_id") or result.parent.name.removeprefix("trial_"))
            row = {"trial_id": trial_id, "epoch": values["epoch"]}
            rows.append(row | {name: values.get(name, math.nan) for name in names})
    return pd.DataFrame(rows, columns=["trial_id", "epoch", *names])


def histories_from_mlflow(
    client: MlflowClient, parent: Run, names: tuple[str, ...] = HISTORY_METRICS
) -> pd.DataFrame:
    """The same from MLflow: each trial run's metric history, by epoch (the step)."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for run in child_runs(client, parent):
        trial_id = run.data.tags.get("trial_id", run.info.run_id)
        for name in names:
            for point in client.get_metric_history(run.info.run_id, name):
                row = rows.setdefault(
                    (trial_id, point.step), {"trial_id": trial_id, "epoch": point.step}
                )
                row[name] = _unclipped(point.value)
    return pd.DataFrame(list(rows.values()), columns=["trial_id", "epoch", *names])


def _ended_in_error(error_text: str, last: Mapping[str, Any]) -> bool:
    """Whether a Tune trial's error is its last word. Tune keeps `error.txt` ("Failure # n
    (occurred at <date>)" per failure) after a trial it restarted (`run.max_failures`) went
    on from its checkpoint: a last result dated after the last failure says it did. Both
    dates are Tune's, to the second, in one sortable format; a restart takes seconds."""
    failures = _FAILURE.findall(error_text)
    reported = last.get("date")
    if not failures or not isinstance(reported, str):
        return True
    return reported <= failures[-1]


def _last_result(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return json.loads(lines[-1]) if lines else {}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def find_parent_run(client: MlflowClient, experiment: str, run_name: str | None = None) -> Run:
    """The search's parent run in `experiment`: the one named `run_name`, or the newest."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise LookupError(f"no MLflow experiment named {experiment!r}")
    name_filter = f" and attributes.run_name = '{run_name}'" if run_name else ""
    runs = client.search_runs(
        [found.experiment_id],
        filter_string=f"tags.`{PARENT_TAG}` IS NULL{name_filter}",
        order_by=["attributes.start_time DESC"],
        max_results=1 if run_name else 50,
    )
    if not runs:
        what = f"named {run_name!r}" if run_name else "at all"
        raise LookupError(f"experiment {experiment!r} has no search run {what}")
    if run_name:
        return runs[0]
    # The newest search that got as far as a trial: one that stopped before its first
    # (a refused storage path, a cluster that went away) has nothing to report.
    return next((run for run in runs if _has_child(client, run)), runs[0])


def _has_child(client: MlflowClient, parent: Run) -> bool:
    return bool(
        client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'",
            max_results=1,
        )
    )


def child_runs(client: MlflowClient, parent: Run) -> list[Run]:
    runs, token = [], None
    while True:
        page = client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'",
            max_results=1000,
            page_token=token,
        )
        runs += list(page)
        token = page.token
        if not token:
            return runs


def frame_from_mlflow(client: MlflowClient, parent: Run) -> pd.DataFrame:
    """One row per child run of `parent`: params (typed back from text), the metrics of
    its last report (MLflow's latest values, less those that report left unmeasured:
    `UNMEASURED_TAG`), and the status tags."""
    rows = []
    for run in child_runs(client, parent):
        config = {key: value if key in TEXT_NOTES else typed_param(value)
                  for key, value in run.data.params.items()}  # fmt: skip
        metrics: dict[str, Any] = {k: _unclipped(v) for k, v in run.data.metrics.items()}
        if "epoch" in metrics:
            for name in UNTIL_TARGET_METRICS:
                metrics.setdefault(name, math.inf)
        for name in filter(None, run.data.tags.get(UNMEASURED_TAG, "").split(",")):
            metrics[name] = math.nan  # the last report's NaN, not an earlier epoch's value
        metrics.update({key: run.data.tags[key] for key in _TEXT_FIELDS if key in run.data.tags})
        row = trial_row(run.data.tags.get("trial_id", run.info.run_id), config, metrics)
        row["run_id"] = run.info.run_id
        rows.append(row)
    return pd.DataFrame(rows)


def _unclipped(value: float) -> float:
    """MLflow stores an infinite metric as the largest float (stores written before such
    metrics were left out); read it back as the infinity it was."""
    return math.copysign(math.inf, value) if abs(value) >= sys.float_info.max else value


def typed_param(text: str) -> Any:
    """MLflow keeps params as text; read them back as the YAML scalars they were, and as
    numbers where Python wrote a float without the dot YAML needs (1e-05)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            value = float(text)
        except ValueError:
            return text
    if isinstance(value, float) and math.isnan(value):
        return text
    return value if isinstance(value, str | int | float | bool) or value is None else text
