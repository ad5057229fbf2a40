"""Turn `DataSettings` into `PreparedData`: one function, one branch per source."""

from __future__ import annotations

import numpy as np

from trainables.data.prepared import PreparedData, Split, channel_stats
from trainables.data.settings import DataSettings
from trainables.data.synthetic import CLASS_NAMES, make_synthetic_split

# Each split draws from its own range of image indices, so growing the training set never
# changes which images are in validation or test.
_SPLIT_OFFSETS = {"train": 0, "val": 1_000_000, "test": 2_000_000}


def prepare_data(settings: DataSettings) -> PreparedData:
    if settings.source == "synthetic":
        return _prepare_synthetic(settings)
    raise ValueError(f"unknown data source {settings.source!r}")  # pragma: no cover


def _prepare_synthetic(settings: DataSettings) -> PreparedData:
    sizes = {
        "train": settings.train_per_class,
        "val": settings.val_per_class,
        "test": settings.test_per_class,
    }
    splits = {}
    for split, per_class in sizes.items():
        images = [
            make_synthetic_split(
                label, _SPLIT_OFFSETS[split], per_class, settings.image_size, settings.seed
            ).numpy()
            for label in range(len(CLASS_NAMES))
        ]
        labels = [np.full(per_class, label, dtype=np.int64) for label in range(len(CLASS_NAMES))]
        splits[split] = Split(np.concatenate(images), np.concatenate(labels))
    mean, std = channel_stats(splits["train"].images)
    return PreparedData(
        train=splits["train"],
        val=splits["val"],
        test=splits["test"],
        class_names=CLASS_NAMES,
        description=(
            f"synthetic cats vs dogs, {settings.image_size} px, seed {settings.seed}, "
            f"{settings.train_per_class}/{settings.val_per_class}/{settings.test_per_class} "
            "per class"
        ),
        mean=mean,
        std=std,
    )
