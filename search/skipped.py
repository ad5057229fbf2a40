"""Suggestions the searcher never started because they would run out of memory.

They have no Tune trial (no actor, no results folder), so they are read back from the
Optuna study, which holds them as PRUNED trials with `started: false`, and become rows of
the trials table and MLflow runs of their own, like every trial that was pruned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from search.optuna_search import (
    ALLOWED_ATTR,
    DETAIL_ATTR,
    PREDICTED_ATTR,
    STARTED_ATTR,
    STATUS_ATTR,
)
from trainables.metrics import PREDICTED_PEAK, STATUS_OOM_PREDICTED

SKIPPED_ID_PREFIX = "skipped-"  # + the Optuna trial number: the row's and run's trial_id


@dataclass(frozen=True)
class SkippedSuggestion:
    trial_id: str
    config: dict[str, Any]  # the trial's whole config: fixed keys and the suggestion
    status: str
    detail: str
    predicted_peak_mb: float | None  # what the memory model predicted, where it did
    allowed_mb: float | None

    @property
    def metrics(self) -> dict[str, Any]:
        """Its values under the metric schema's names: nothing was measured."""
        return {"status": self.status, "status_detail": self.detail, "epoch": 0}


def skipped_suggestions(
    storage: str, study_name: str, fixed_config: Mapping[str, Any]
) -> list[SkippedSuggestion]:
    """The study's suggestions that were never started, in the order they were made."""
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # no study: a search with nothing to sample
        return []
    return [
        SkippedSuggestion(
            trial_id=f"{SKIPPED_ID_PREFIX}{trial.number}",
            config=_config(fixed_config, trial),
            status=str(trial.user_attrs.get(STATUS_ATTR, STATUS_OOM_PREDICTED)),
            detail=str(trial.user_attrs.get(DETAIL_ATTR, "")),
            predicted_peak_mb=trial.user_attrs.get(PREDICTED_ATTR),
            allowed_mb=trial.user_attrs.get(ALLOWED_ATTR),
        )
        for trial in study.get_trials(deepcopy=False)
        if trial.user_attrs.get(STARTED_ATTR) is False
    ]


def _config(fixed_config: Mapping[str, Any], trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The config the trial would have run with, and the memory model's figure for it."""
    config = {**fixed_config, **trial.params}
    predicted = trial.user_attrs.get(PREDICTED_ATTR)
    if predicted is not None:
        config[PREDICTED_PEAK] = round(float(predicted), 3)
    return config
