"""Tune's results -> one pandas row per trial, in the metric schema's names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
from ray.tune import ResultGrid

from search.tracking import flatten
from trainables.metrics import METRICS

STATUS_ERROR = "error"  # the trial raised: a bug or a crash, not a pruned trial


CONFIG_PREFIX = "config."  # params as MLflow keeps them apart: `lr` the metric, `config.lr`


def trial_row(trial_id: str, config: dict[str, Any], metrics: dict[str, Any], error: Any) -> dict:
    row: dict[str, Any] = {"trial_id": trial_id}
    row.update({f"{CONFIG_PREFIX}{key}": value for key, value in flatten("", config).items()})
    row.update({name: metrics[name] for name in METRICS if name in metrics})
    if error is not None:
        row["status"] = STATUS_ERROR
        row["error"] = str(error).strip().splitlines()[-1][:300] if str(error).strip() else ""
    row.setdefault("status", STATUS_ERROR)
    return row


def results_frame(grid: ResultGrid | Iterable[Any]) -> pd.DataFrame:
    """One row per trial: its config (sampled and fixed keys), last metrics and status."""
    rows = []
    for result in grid:
        metrics = result.metrics or {}
        trial_id = metrics.get("trial_id") or (result.path or "").rstrip("/").split("/")[-1]
        rows.append(trial_row(trial_id, result.config or {}, metrics, result.error))
    return pd.DataFrame(rows)
