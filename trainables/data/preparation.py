"""Turn `DataSettings` into `PreparedData`: one function, one branch per source."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from trainables.data.cache import DecodedSet, decoded_images
from trainables.data.catalogue import Catalogue
from trainables.data.folder import has_class_folders_with_images, list_image_folder
from trainables.data.oxford import list_oxford_pets
from trainables.data.prepared import PreparedData, Split, channel_stats
from trainables.data.settings import DataSettings
from trainables.data.splits import split_rows
from trainables.data.synthetic import CLASS_NAMES
from trainables.data.synthetic_cache import synthetic_split

# Each split draws from its own range of image indices, so growing the training set never
# changes which images are in validation or test.
_SPLIT_OFFSETS = {"train": 0, "val": 1_000_000, "test": 2_000_000}


def prepare_data(settings: DataSettings) -> PreparedData:
    """Decoded, split images as `settings` asks; `PreparedData.source` says which source
    was used (for `auto`: image_folder or synthetic).

    Raises `DataUnavailable` (a ValueError) when the images cannot be had."""
    if settings.source == "synthetic":
        return _prepare_synthetic(settings)
    if settings.source == "image_folder":
        return _prepare_decoded(settings, list_image_folder(_root(settings)))
    if settings.source == "oxford_pets":
        root = settings.root_path() or settings.cache_path() / "oxford_pets"
        return _prepare_decoded(settings, list_oxford_pets(root))
    if settings.source == "auto":
        return _prepare_auto(settings)
    raise ValueError(f"unknown data source {settings.source!r}")  # pragma: no cover


def _root(settings: DataSettings) -> Path:
    root = settings.root_path()
    if root is None:  # refused by DataSettings; reached only by skipping its validation
        raise ValueError(f"data.root is required for source {settings.source!r}, got None")
    return root


def _prepare_auto(settings: DataSettings) -> PreparedData:
    root = settings.root_path()
    if root is not None and has_class_folders_with_images(root):
        prepared = _prepare_decoded(settings, list_image_folder(root))
        return replace(prepared, description=f"auto chose {prepared.description}")
    # "all" means nothing for drawn images: fall back to the field's default count.
    train = settings.train_per_class
    if train == "all":
        train = DataSettings.model_fields["train_per_class"].default
    synthetic = settings.model_copy(update={"source": "synthetic", "train_per_class": train})
    prepared = _prepare_synthetic(synthetic)
    why = "no root given" if root is None else f"no class folders with images at {root}"
    return replace(prepared, description=f"auto chose {prepared.description} ({why})")


def _prepare_synthetic(settings: DataSettings) -> PreparedData:
    assert settings.train_per_class != "all"  # refused by DataSettings for synthetic
    sizes = {
        "train": settings.train_per_class,
        "val": settings.val_per_class,
        "test": settings.test_per_class,
    }
    splits = {}
    for split, per_class in sizes.items():
        images = [
            synthetic_split(
                label,
                _SPLIT_OFFSETS[split],
                per_class,
                settings.image_size,
                settings.seed,
                settings.cache_path(),
            )
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
        source="synthetic",
    )


def _prepare_decoded(settings: DataSettings, catalogue: Catalogue) -> PreparedData:
    """Decode (or reuse the cache of) every file, then split per class by the seed."""
    decoded = decoded_images(catalogue, settings.image_size, settings.cache_path())
    rows = split_rows(
        decoded.labels,
        decoded.class_names,
        train=settings.train_per_class,
        val=settings.val_per_class,
        test=settings.test_per_class,
        seed=settings.seed,
    )
    # Fancy indexing reads the chosen rows out of the memory map into memory: the trial
    # (or Ray's object store) then holds only the images it uses.
    splits = {
        name: Split(np.asarray(decoded.images[indices]), decoded.labels[indices])
        for name, indices in rows.items()
    }
    mean, std = channel_stats(splits["train"].images)
    return PreparedData(
        train=splits["train"],
        val=splits["val"],
        test=splits["test"],
        class_names=decoded.class_names,
        description=_describe(catalogue, decoded, splits, settings),
        mean=mean,
        std=std,
        source=catalogue.source,
    )


def _describe(
    catalogue: Catalogue, decoded: DecodedSet, splits: dict[str, Split], settings: DataSettings
) -> str:
    classes = ", ".join(decoded.class_names)
    train = settings.train_per_class
    if train == "all":
        per_class = np.bincount(splits["train"].labels, minlength=len(decoded.class_names))
        train = "all (" + "+".join(str(count) for count in per_class) + ")"
    cache = "cache reused" if decoded.reused else "decoded now"
    return (
        f"{catalogue.source} {catalogue.root} ({classes}), {settings.image_size} px, "
        f"seed {settings.seed}, {train}/{settings.val_per_class}/{settings.test_per_class} "
        f"per class, from {len(decoded.labels)} images ({decoded.skipped} files skipped); "
        f"{cache}: {decoded.directory}"
    )
