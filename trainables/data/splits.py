"""Per-class train / val / test splits of a decoded set, fixed by a seed.

Each class's images (in file-name order) are shuffled by a generator seeded with
(seed, class), and taken in the order val, test, train: the training count never moves
the validation and test images, and "all" trains on everything left.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from trainables.data.errors import DataUnavailable


def split_rows(
    labels: np.ndarray,
    class_names: tuple[str, ...],
    *,
    train: int | Literal["all"],
    val: int,
    test: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """Row indices of each split ("train", "val", "test"), ascending (sequential reads)."""
    counts = np.bincount(labels, minlength=len(class_names))
    needed = val + test + (1 if train == "all" else train)
    short = [
        f"{name!r} has {count}"
        for name, count in zip(class_names, counts, strict=True)
        if count < needed
    ]
    if short:
        asked = f"val {val} + test {test} + train {train if train != 'all' else 'at least 1'}"
        raise DataUnavailable(
            f"too few usable images per class for the split sizes: {', '.join(short)}, fewer "
            f"than {asked} = {needed}; lower data.val_per_class, data.test_per_class or "
            "data.train_per_class"
        )
    parts: dict[str, list[np.ndarray]] = {"train": [], "val": [], "test": []}
    for label in range(len(class_names)):
        rows = np.flatnonzero(labels == label)
        shuffled = rows[np.random.default_rng([seed, label]).permutation(len(rows))]
        parts["val"].append(shuffled[:val])
        parts["test"].append(shuffled[val : val + test])
        end = None if train == "all" else val + test + train
        parts["train"].append(shuffled[val + test : end])
    return {split: np.sort(np.concatenate(chunks)) for split, chunks in parts.items()}
