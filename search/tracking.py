"""MLflow: one parent run per search, one nested child run per trial, all on the driver.

Ray's `MLflowLoggerCallback` logs every Tune bookkeeping key, one HTTP call each, and cannot
nest runs; this callback logs only the metric schema, one batch per result, and nests each
trial under the search's parent run with the `mlflow.parentRunId` tag. A trial that is
retried or resumed continues its own child run (found again by its `trial_id` tag).
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME
from ray import tune

from analysis.flat import flatten
from analysis.load import CONFIG_PREFIX
from trainables.metrics import (
    ABLATION,
    ABLATION_OF,
    NUMERIC_METRICS,
    PRUNED_STATUSES,
    STATUS_ERROR,
    TEXT_METRICS,
    UNMEASURED_TAG,
)
from trainables.techniques import run_tags

if TYPE_CHECKING:
    import pandas as pd

    from search.skipped import SkippedSuggestion

PARAM_VALUE_LIMIT = 6000  # MLflow's limit on a param value's length
# The experiment tag that tells MLflow 3's UI the experiment is classic model training. The
# UI reads it only where its GenAI / model-training switch is off; 3.17 shows the switch,
# so the runs link carries `workflowType` as well (search.console.runs_link).
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
NOTE_TAG = "mlflow.note.content"  # a run's description: shown in full on its page
# MLflow 3's runs page loads a view (columns, runs shown in charts) from an experiment tag
# with this prefix when its link carries `viewStateShareKey=<the rest of the key>`.
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
BATCH_LIMIT = 100  # params per log_batch call allowed by MLflow


def git_commit(directory: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


class StoreUnavailable(Exception):
    """MLflow could not open the tracking store; raised before any trial runs."""


def open_store(tracking_uri: str) -> None:
    """Open the tracking store once: a new SQLite store makes its tables here (1-2 s on
    the project's 2-core machine), which a search does while Ray starts; MLflow keeps the
    opened store for every later client of the same URI. `StoreUnavailable` says why it
    cannot be opened (what `search.cluster.check_tracking_store` could not see ahead)."""
    try:
        MlflowClient(tracking_uri).search_experiments(max_results=1)
    except Exception as error:  # MLflow's, SQLAlchemy's or a missing database driver's
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise StoreUnavailable(
            f"MLflow cannot open the store at {tracking_uri} ({type(error).__name__}: {first_line})"
        ) from error


def trial_run_name(config: Mapping[str, Any], trial_id: str) -> str:
    """What a trial trains with, readable in MLflow's runs list, e.g.
    `bs64-adam-lr0.001-amp-recompute-acc4-grow2every3-s1-5c1e9f3a`: the model when it is not the
    default small CNN, the batch, optimizer and lr, the techniques that are on (each as the
    technique table names it, `trainables.techniques`), the seed, and the trial id as the
    console prints it, which keeps it unique."""
    model = config.get("model")
    parts = [str(model)] if model and model != "small_cnn" else []
    parts.append(f"bs{config.get('batch_size', '?')}")
    if config.get("optimizer"):
        parts.append(str(config["optimizer"]))
    if isinstance(config.get("lr"), int | float):
        parts.append(f"lr{config['lr']:.2g}")
    parts += run_tags(config)
    if config.get("seed"):
        parts.append(f"s{config['seed']}")
    return "-".join([*parts, trial_id])


def ablation_run_name(name: str, change: str, base: str) -> str:
    """An ablation trial's run says which change of which trial it is, the change first:
    the runs list's name column shows about twenty characters, and "[ablation of a7f7..."
    was all eleven ablations showed there (2026-12-07)."""
    return f"[{change}, ablation of {base}] {name}"


def tag_ablated(parent: ParentRun, ablations: pd.DataFrame) -> None:
    """Tag each ablated trial's run with how many ablations it has and the filter that
    lists them in the MLflow UI (`tags.ablation_of = '<trial>'`)."""
    column = f"{CONFIG_PREFIX}{ABLATION_OF}"
    if ablations.empty or column not in ablations:
        return
    for base, count in ablations[column].astype(str).value_counts().items():
        runs = parent.client.search_runs(
            [parent.experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent.run_id}' "
            f"and tags.trial_id = '{base}'",
            max_results=1,
        )
        if runs:
            note = f"{count} runs, filter: tags.{ABLATION_OF} = '{base}'"
            parent.client.set_tag(runs[0].info.run_id, "ablations", note)


def pruned_run_name(name: str, status: str) -> str:
    """A pruned trial's run name says so first: the runs list shows it without a column."""
    return f"[{status}] {name}"


def save_review_view(
    client: MlflowClient, experiment_id: str, key: str, objectives: Sequence[str]
) -> str:
    """A view of the experiment's runs with the search's objectives, whether a trial is on
    the front (`is_pareto`, tagged when the search ends) and `status` as columns, and every
    run drawn in the charts, saved the way MLflow's UI shares a view; returns the key that
    the runs link passes as `viewStateShareKey`."""
    columns = [f"metrics.`{name}`" for name in objectives]
    columns += ["tags.`is_pareto`", "tags.`status`", "tags.`status_detail`"]
    state = {"selectedColumns": columns, "runsHiddenMode": "SHOW_ALL"}
    now = int(time.time() * 1000)
    envelope = {
        "name": f"{key}: objectives and status",
        "createdAt": now,
        "updatedAt": now,
        "state": json.dumps(state),
    }
    client.set_experiment_tag(experiment_id, f"{SHARED_VIEW_PREFIX}{key}", json.dumps(envelope))
    return key


def log_params(client: MlflowClient, run_id: str, params: Mapping[str, Any]) -> None:
    items = [Param(key, str(value)[:PARAM_VALUE_LIMIT]) for key, value in params.items()]
    for start in range(0, len(items), BATCH_LIMIT):
        client.log_batch(run_id, params=items[start : start + BATCH_LIMIT])


class ParentRun:
    """The search's MLflow run; created once, reopened by `--resume`."""

    def __init__(self, client: MlflowClient, run_id: str, experiment_id: str) -> None:
        self.client = client
        self.run_id = run_id
        self.experiment_id = experiment_id

    @classmethod
    def start(
        cls,
        tracking_uri: str,
        experiment: str,
        run_name: str,
        params: Mapping[str, Any],
        tags: Mapping[str, str],
        resume_run_id: str | None = None,
    ) -> ParentRun:
        client = MlflowClient(tracking_uri)
        found = client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else client.create_experiment(experiment)
        if found is None or EXPERIMENT_KIND_TAG not in found.tags:
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        if resume_run_id is not None:
            client.update_run(resume_run_id, status=RunStatus.to_string(RunStatus.RUNNING))
            return cls(client, resume_run_id, experiment_id)
        run = client.create_run(experiment_id, run_name=run_name, tags=dict(tags))
        try:
            log_params(client, run.info.run_id, params)
        except BaseException:  # Ctrl-C included: no caller has the run yet to end it
            client.set_terminated(run.info.run_id, status="FAILED")
            raise
        return cls(client, run.info.run_id, experiment_id)

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)

    def close_unfinished_trials(self, why: str) -> int:
        """End every trial run of this search still RUNNING as FAILED, tagged with why:
        after an interruption, or runs whose trial was lost with a killed driver."""
        running = self.client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{self.run_id}' and attributes.status = 'RUNNING'"
            ),
            max_results=10_000,
        )
        for run in running:
            self.client.set_tag(run.info.run_id, "status", why)
            self.client.set_terminated(run.info.run_id, status="FAILED")
        return len(running)


def create_child_run(
    client: MlflowClient,
    experiment_id: str,
    parent_run_id: str,
    name: str,
    tags: Mapping[str, str],
    params: Mapping[str, Any],
) -> str:
    """A trial's run under the search's run: named, tagged, its params logged."""
    all_tags = {MLFLOW_PARENT_RUN_ID: parent_run_id, MLFLOW_RUN_NAME: name, **tags}
    run = client.create_run(experiment_id, run_name=name, tags=all_tags)
    log_params(client, run.info.run_id, params)
    return run.info.run_id


def pruned_tags(status: str, detail: str) -> dict[str, str]:
    """What a pruned trial's run says of it: its status and why, also as its description."""
    return {"status": status, "status_detail": detail, NOTE_TAG: f"{status}: {detail}"}


def log_skipped(
    parent: ParentRun, skipped: Sequence[SkippedSuggestion], fixed_params: Mapping[str, Any]
) -> int:
    """A child run for each suggestion that was never started (once: a resumed search finds
    the runs it logged before); returns how many runs were new."""
    logged = {
        run.data.tags.get("trial_id")
        for run in parent.client.search_runs(
            [parent.experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent.run_id}' "
            "and tags.started = 'false'",
            max_results=10_000,
        )
    }
    new = [suggestion for suggestion in skipped if suggestion.trial_id not in logged]
    for suggestion in new:
        config = {key: value for key, value in suggestion.config.items() if key != "data"}
        name = pruned_run_name(trial_run_name(config, suggestion.trial_id), suggestion.status)
        tags = {"trial_id": suggestion.trial_id, "started": "false",
                **pruned_tags(suggestion.status, suggestion.detail)}  # fmt: skip
        run_id = create_child_run(parent.client, parent.experiment_id, parent.run_id, name,
                                  tags, {**fixed_params, **config})  # fmt: skip
        parent.client.set_terminated(run_id, status="FINISHED")
    return len(new)


class MlflowTrialCallback(tune.Callback):
    """Logs each trial as a child run of the search's parent run (driver side)."""

    def __init__(
        self,
        tracking_uri: str,
        experiment_id: str,
        parent_run_id: str,
        fixed_params: Mapping[str, Any],
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.fixed_params = dict(fixed_params)  # the same for every trial
        self._client: MlflowClient | None = None
        self._runs: dict[str, str] = {}  # trial_id -> MLflow run id
        self._last_epoch: dict[str, int] = {}  # MLflow run id -> last epoch in its history

    def __getstate__(self) -> dict[str, Any]:
        # Tune saves callbacks with the experiment; a client is rebuilt after restore, and
        # the last epochs are read again from MLflow: the saved ones may be older.
        return {**self.__dict__, "_client": None, "_last_epoch": {}}

    @property
    def client(self) -> MlflowClient:
        if self._client is None:
            self._client = MlflowClient(self.tracking_uri)
        return self._client

    def run_id_for(self, trial: Any) -> str:
        """The trial's child run, created on first sight or found again after a restart."""
        if trial.trial_id in self._runs:
            return self._runs[trial.trial_id]
        existing = self.client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{self.parent_run_id}' "
                f"and tags.trial_id = '{trial.trial_id}'"
            ),
            max_results=1,
        )
        if existing:
            run_id = existing[0].info.run_id
            self.client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        else:
            run_id = self._create_run(trial)
            self._last_epoch[run_id] = 0
        self._runs[trial.trial_id] = run_id
        return run_id

    def last_epoch(self, run_id: str) -> int:
        """The last epoch the run's history holds (0: none), read from MLflow on first use."""
        if run_id not in self._last_epoch:
            logged = self.client.get_run(run_id).data.metrics.get("epoch")
            self._last_epoch[run_id] = int(logged) if logged is not None else 0
        return self._last_epoch[run_id]

    def run_name(self, trial: Any) -> str:
        name = trial_run_name({**self.fixed_params, **trial.config}, trial.trial_id)
        if trial.config.get(ABLATION_OF):
            return ablation_run_name(name, trial.config[ABLATION], trial.config[ABLATION_OF])
        return name

    def _create_run(self, trial: Any) -> str:
        config = {key: value for key, value in trial.config.items() if key != "data"}
        tags = {"trial_id": trial.trial_id, "trial_name": str(trial), "status": "running"}
        if config.get(ABLATION_OF):  # found from the trial it ablates (`tag_ablated`)
            tags |= {ABLATION_OF: str(config[ABLATION_OF]), ABLATION: str(config[ABLATION])}
        # a mapping (the speed scale) as its keys, as the fixed params and Tune's folder
        # have it, not once more as one string beside them
        params = {**self.fixed_params, **flatten("", config)}
        return create_child_run(
            self.client, self.experiment_id, self.parent_run_id, self.run_name(trial), tags, params
        )

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.run_id_for(trial)

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        step = int(result.get("epoch", result.get("training_iteration", 0)))
        now = int(time.time() * 1000)
        metrics = [
            Metric(name, float(result[name]), now, step)
            for name in NUMERIC_METRICS
            # NaN: not measured (a pruned trial's report); inf: not reached (time_to_target_s)
            # or beyond measure, which MLflow would store as the largest float and which
            # would empty its chart. Either is left out of the history: nothing was measured.
            if isinstance(result.get(name), int | float) and math.isfinite(result[name])
        ]
        run_id = self.run_id_for(trial)
        # Tune calls this before it registers the epoch's checkpoint: a trial killed in
        # between resumes from the epoch before and reports this epoch again. Its history
        # keeps the first report, so each epoch holds one value.
        if step <= self.last_epoch(run_id):
            metrics = []
        else:
            self._last_epoch[run_id] = step
        tags = [RunTag(name, str(result[name])) for name in TEXT_METRICS if result.get(name)]
        unmeasured = [name for name in NUMERIC_METRICS if _is_nan(result.get(name))]
        tags.append(RunTag(UNMEASURED_TAG, ",".join(unmeasured)))  # this report's, each time
        if result.get("status") in PRUNED_STATUSES:
            note = pruned_tags(result["status"], str(result.get("status_detail", "")))[NOTE_TAG]
            tags.append(RunTag(NOTE_TAG, note))
            name = pruned_run_name(self.run_name(trial), result["status"])
            self.client.update_run(run_id, name=name)
        self.client.log_batch(run_id, metrics=metrics, tags=tags)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.client.set_terminated(self.run_id_for(trial), status="FINISHED")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        run_id = self.run_id_for(trial)
        self.client.set_tag(run_id, "status", STATUS_ERROR)
        self.client.set_terminated(run_id, status="FAILED")


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
