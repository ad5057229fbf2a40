"""Shared fixtures: one Ray instance for the whole run, tiny prepared data, paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainables.data import DataSettings, PreparedData, prepare_data

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


TINY_DATA = DataSettings(
    image_size=16, train_per_class=24, val_per_class=8, test_per_class=8, seed=0
)


@pytest.fixture(scope="session")
def tiny_data() -> PreparedData:
    """A few 16 px images per class: enough to train a step, small enough for every test."""
    return prepare_data(TINY_DATA)


@pytest.fixture(scope="session")
def ray_instance():
    """One local Ray instance shared by every test that needs Ray (start-up costs seconds)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    yield ray
    ray.shutdown()
