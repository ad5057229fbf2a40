"""Prepared data: decoded images as uint8 arrays, split per class, ready for any trial.

Prepared once per search and shared with every trial through Ray's object store
(`tune.with_parameters`). numpy arrays are read zero-copy from the object store, so a
trial on the same node does not get its own copy of the images.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # uint8 (N, 3, H, W)
    labels: np.ndarray  # int64 (N,)

    def __post_init__(self) -> None:
        if self.images.dtype != np.uint8 or self.images.ndim != 4 or self.images.shape[1] != 3:
            raise ValueError(
                f"images must be uint8 of shape (N, 3, H, W), got {self.images.dtype} "
                f"{self.images.shape}"
            )
        if self.labels.shape != (len(self.images),):
            raise ValueError(
                f"labels must have shape ({len(self.images)},), got {self.labels.shape}"
            )

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class PreparedData:
    train: Split
    val: Split
    test: Split
    class_names: tuple[str, ...]
    description: str  # one line for logs and MLflow: where the images came from
    mean: tuple[float, float, float]  # per-channel mean of the training split, in [0, 1]
    std: tuple[float, float, float]  # per-channel std of the training split, in [0, 1]
    source: str  # the source used: "synthetic", "image_folder" or "oxford_pets" (auto: one)

    @property
    def image_size(self) -> int:
        return int(self.train.images.shape[-1])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def channel_stats(
    images: np.ndarray, chunk: int = 256
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """Per-channel mean and std of uint8 (N, 3, H, W) images, scaled to [0, 1].

    Accumulated in chunks so 224 px sets never exist as one float64 copy.
    """
    total = np.zeros(3)
    total_sq = np.zeros(3)
    for begin in range(0, len(images), chunk):
        block = images[begin : begin + chunk].astype(np.float64) / 255.0
        total += block.sum(axis=(0, 2, 3))
        total_sq += np.square(block).sum(axis=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 1e-6))
    return (float(mean[0]), float(mean[1]), float(mean[2])), (
        float(std[0]),
        float(std[1]),
        float(std[2]),
    )
