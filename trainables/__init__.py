"""Ray Tune trainables for image classification with large-batch techniques.

    from trainables import train_classifier
    tune.Tuner(tune.with_parameters(train_classifier, data=prepared), ...)

This package never imports `search`: other people's searches use it on its own.
"""

from trainables.classifier import fit_classifier, train_classifier
from trainables.data import DataSettings, DataUnavailable, PreparedData, prepare_data
from trainables.metrics import METRICS
from trainables.settings import TrainSettings

__all__ = [
    "METRICS",
    "DataSettings",
    "DataUnavailable",
    "PreparedData",
    "TrainSettings",
    "fit_classifier",
    "prepare_data",
    "train_classifier",
]
