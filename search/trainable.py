"""The trainable a search runs: `train_classifier`, unless the searcher has already
predicted that the trial's config runs out of memory, in which case it ends at once."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ray import tune

from search.early_stopping import rung_epoch
from trainables import PreparedData, train_classifier
from trainables.metrics import (
    PREDICTED_FROM,
    SEARCH_NOTES,
    STATUS_OOM_PREDICTED,
    TIMED_AGAINST_NOTE,
    pruned_metrics,
)


def without_notes(config: Mapping[str, Any]) -> dict[str, Any]:
    """The trainable's config: a trial's config less the search's notes."""
    return {key: value for key, value in config.items() if key not in SEARCH_NOTES}


def classifier_trial(
    config: dict[str, Any], data: PreparedData | None = None, rungs: tuple[int, ...] = ()
) -> None:
    """`rungs`: the early-stopping rungs, where the trial must report `gen_gap` (its
    `gap_epochs`, besides any the config asks for), counted from the end of its learning
    rate's warmup as the rule counts them (`search.early_stopping.rung_epoch`)."""
    reason = config.get(PREDICTED_FROM)
    if reason:  # the searcher ran out of other suggestions to give
        tune.report(pruned_metrics(STATUS_OOM_PREDICTED, f"not trained: {reason}", epoch=0))
        return
    settings = without_notes(config)
    if config.get(TIMED_AGAINST_NOTE):  # an ablation timed against its base
        settings["speed_baseline"] = json.loads(config[TIMED_AGAINST_NOTE])
    if rungs:
        warmup = int(settings.get("warmup_epochs") or 0)
        at_rungs = {rung_epoch(rung, warmup) for rung in rungs}
        settings["gap_epochs"] = sorted({*settings.get("gap_epochs", ()), *at_rungs})
    train_classifier(settings, data)
