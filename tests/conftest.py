"""Shared fixtures: one Ray instance for the whole run, tiny prepared data, paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainables.data import DataSettings, PreparedData, prepare_data

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
# The override for whole searches whose tests are not about speed: no speed scale timed as
# the search starts (tests/search/test_speed_scale.py and test_startup.py test that it is).
# On the 2-core machine timing it made a smoke search about 9 s longer, 30 s against 21 s
# (docs/RESULTS.md, section 49), mostly the search's start waiting for it.
UNSCALED = "search.speed_reference=false"


@pytest.fixture(scope="session", autouse=True)
def _cache_of_this_run(tmp_path_factory):
    """Synthetic images and decoded folders are cached for this run, not in the user's
    ~/.cache: what a test finds in the cache is what this run put there."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))


@pytest.fixture(autouse=True)
def _environment_restored():
    """`search.run.main` sets Ray's variables for its process; tests that call it in-process
    must not hand them on to the next test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


TINY_DATA = DataSettings(
    image_size=16, train_per_class=24, val_per_class=8, test_per_class=8, seed=0
)


@pytest.fixture(scope="session")
def tiny_data() -> PreparedData:
    """A few 16 px images per class: enough to train a step, small enough for every test."""
    return prepare_data(TINY_DATA)


@pytest.fixture(scope="session")
def _ray_shutdown_at_end():
    import ray

    yield
    ray.shutdown()


@pytest.fixture
def ray_instance(_ray_shutdown_at_end):
    """One local Ray instance shared by the tests that need Ray (start-up costs seconds);
    started again only if a test had to shut it down (the two-node cluster test)."""
    import ray

    if not ray.is_initialized():
        # "local": a new instance, never a cluster another test started with `ray start`
        # (under pytest-xdist one may be up while this starts).
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False)
    return ray


@pytest.fixture
def own_device_gates(tmp_path, monkeypatch):
    """The device gates of this test's trials in a folder of their own: under
    pytest-xdist another worker's trials on the node's gate would crowd it, and a crowded
    epoch times only the windows its configuration still wants (`SpeedWindow`)."""
    import tempfile

    from trainables import device_gate

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(device_gate, "_gates", {})
    return tmp_path / device_gate.GATES_DIR


@pytest.fixture
def fake_cuda(monkeypatch):
    """One card faked at `torch.cuda` (tests/fake_cuda.py): the project's CUDA code runs on
    this CPU, every device it passes checked as a real card checks it."""
    from tests.fake_cuda import FakeCard, FakeCuda

    return FakeCuda([FakeCard()]).install(monkeypatch)
