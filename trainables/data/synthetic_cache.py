"""Synthetic images drawn once and kept on disk, like decoded image folders.

Drawing is plain numpy per image (the default search's 2,000 images at 32 px take about
2 s on this project's 2-core machine, larger sizes longer), and every search of a config
draws the same images. So each (class, index range, size, seed) is saved under the
cache folder the first time and read back after:

    synthetic/<size>px-<key>.npy    uint8 (count, 3, size, size)

The key hashes the arguments, the generator's own source and numpy's version: a change
to the drawing gives new files. A file is written beside its name and renamed into
place, so a reader sees a whole file or none; a cache that cannot be written (a
read-only folder, a full disk) costs only the drawing, never the search. A temporary
file an hour old was left by a process that died writing it, and is removed by the next
one to write that entry (no lock is held: a younger one may be another's, still writing).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from functools import cache
from pathlib import Path

import numpy as np

from trainables.data import synthetic

log = logging.getLogger("trainables.data")

STALE_AFTER_S = 3600.0  # a write takes well under a second


def synthetic_split(
    label: int, start: int, count: int, image_size: int, seed: int, cache_root: Path
) -> np.ndarray:
    """`synthetic.make_synthetic_split(...)` as a uint8 array, from the cache when there."""
    path = (
        cache_root
        / "synthetic"
        / f"{image_size}px-{_key(label, start, count, image_size, seed)}.npy"
    )
    try:
        images = np.load(path)
        if images.shape == (count, 3, image_size, image_size) and images.dtype == np.uint8:
            return images
    except (OSError, ValueError, EOFError):  # not there yet, or cut short by a crash
        pass
    images = synthetic.make_synthetic_split(label, start, count, image_size, seed).numpy()
    partial: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(path)
        with tempfile.NamedTemporaryFile(
            dir=path.parent, prefix=f"{path.stem}.", suffix=".partial", delete=False
        ) as file:
            partial = Path(file.name)
            np.save(file, images)
        os.replace(partial, path)
    except OSError as error:
        if partial is not None:
            partial.unlink(missing_ok=True)
        log.warning("synthetic images not cached at %s: %s", path.parent, error)
    return images


def remove_stale_partials(path: Path) -> None:
    """Remove the temporary files of `path` older than `STALE_AFTER_S`."""
    for partial in path.parent.glob(f"{path.stem}.*.partial"):
        try:
            if time.time() - partial.stat().st_mtime > STALE_AFTER_S:
                partial.unlink()
        except FileNotFoundError:  # removed meanwhile, by its writer or another sweep
            pass


def _key(label: int, start: int, count: int, image_size: int, seed: int) -> str:
    about = [_generator_fingerprint(), np.__version__, label, start, count, image_size, seed]
    return hashlib.sha256(json.dumps(about).encode()).hexdigest()[:20]


@cache
def _generator_fingerprint() -> str:
    return hashlib.sha256(Path(synthetic.__file__).read_bytes()).hexdigest()
