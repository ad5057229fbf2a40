"""Ray Tune trainables for image classification with large-batch techniques.

    from trainables import train_classifier
    tune.Tuner(tune.with_parameters(train_classifier, data=prepared), ...)

This package never imports `search`: other people's searches use it on its own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported on first use, so that `trainables.settings` and `trainables.metrics` load without
# torch or Ray: the search's CLI checks a config (and answers --help) in about a second.
_EXPORTS = {
    "METRICS": "trainables.metrics",
    "DataSettings": "trainables.data.settings",
    "DataUnavailable": "trainables.data.errors",
    "PreparedData": "trainables.data.prepared",
    "TrainSettings": "trainables.settings",
    "build_model": "trainables.models",
    "register_model": "trainables.models",
    "fit_classifier": "trainables.classifier",
    "prepare_data": "trainables.data.preparation",
    "train_classifier": "trainables.classifier",
    "WORKER_ENV": "trainables.host_memory",
}
__all__ = [
    "METRICS",
    "WORKER_ENV",
    "DataSettings",
    "DataUnavailable",
    "PreparedData",
    "TrainSettings",
    "build_model",
    "fit_classifier",
    "prepare_data",
    "register_model",
    "train_classifier",
]

if TYPE_CHECKING:
    from trainables.classifier import fit_classifier, train_classifier
    from trainables.data.errors import DataUnavailable
    from trainables.data.preparation import prepare_data
    from trainables.data.prepared import PreparedData
    from trainables.data.settings import DataSettings
    from trainables.host_memory import WORKER_ENV
    from trainables.metrics import METRICS
    from trainables.models import build_model, register_model
    from trainables.settings import TrainSettings


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trainables' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
