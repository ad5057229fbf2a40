"""Synthetic images are drawn once per (class, range, size, seed) and read back after."""

import os
import time

import numpy as np
import pytest

from trainables.data import synthetic, synthetic_cache
from trainables.data.synthetic_cache import synthetic_split


def entries(root):
    return sorted((root / "synthetic").glob("*.npy"))


def test_a_split_drawn_once_is_read_back_without_drawing(tmp_path, monkeypatch):
    first = synthetic_split(1, 5, 3, 16, 0, tmp_path)
    assert first.shape == (3, 3, 16, 16) and first.dtype == np.uint8
    assert len(entries(tmp_path)) == 1

    def no_drawing(*args):
        raise AssertionError("drew again")

    monkeypatch.setattr(synthetic, "make_synthetic_split", no_drawing)
    assert np.array_equal(synthetic_split(1, 5, 3, 16, 0, tmp_path), first)


def test_the_cached_images_are_the_drawn_ones(tmp_path):
    drawn = synthetic.make_synthetic_split(0, 0, 2, 16, 3).numpy()
    synthetic_split(0, 0, 2, 16, 3, tmp_path)
    assert np.array_equal(synthetic_split(0, 0, 2, 16, 3, tmp_path), drawn)


@pytest.mark.parametrize(
    "other",
    [(1, 0, 2, 16, 0), (0, 1, 2, 16, 0), (0, 0, 3, 16, 0), (0, 0, 2, 24, 0), (0, 0, 2, 16, 1)],
)
def test_each_class_range_size_and_seed_has_its_own_entry(tmp_path, other):
    synthetic_split(0, 0, 2, 16, 0, tmp_path)
    synthetic_split(*other, tmp_path)
    assert len(entries(tmp_path)) == 2


def test_a_changed_generator_draws_anew(tmp_path, monkeypatch):
    synthetic_split(0, 0, 2, 16, 0, tmp_path)
    monkeypatch.setattr(synthetic_cache, "_generator_fingerprint", lambda: "edited")
    synthetic_split(0, 0, 2, 16, 0, tmp_path)
    assert len(entries(tmp_path)) == 2


def test_a_file_cut_short_is_drawn_again_and_replaced(tmp_path):
    images = synthetic_split(0, 0, 2, 16, 0, tmp_path)
    (path,) = entries(tmp_path)
    path.write_bytes(path.read_bytes()[:100])
    assert np.array_equal(synthetic_split(0, 0, 2, 16, 0, tmp_path), images)
    assert path.stat().st_size > 100 and not list((tmp_path / "synthetic").glob("*.partial"))


def test_a_cache_that_cannot_be_written_costs_only_the_drawing(tmp_path, caplog):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")
    images = synthetic_split(0, 0, 2, 16, 0, not_a_folder)
    assert np.array_equal(images, synthetic.make_synthetic_split(0, 0, 2, 16, 0).numpy())
    assert "not cached" in caplog.text


def test_a_partial_file_an_hour_old_is_removed_and_a_young_one_kept(tmp_path):
    synthetic_split(0, 0, 2, 16, 0, tmp_path)
    (path,) = entries(tmp_path)
    stale, young = (path.with_name(f"{path.stem}.{name}.partial") for name in ("a", "b"))
    for partial in (stale, young):
        partial.write_bytes(b"cut short when its writer died")
    hours_ago = time.time() - synthetic_cache.STALE_AFTER_S - 60
    os.utime(stale, (hours_ago, hours_ago))
    path.unlink()  # drawn and written again
    synthetic_split(0, 0, 2, 16, 0, tmp_path)
    assert not stale.exists() and young.exists()  # a young one may be another's, writing
