import numpy as np
import pytest

from trainables.data import DataSettings, PreparedData, Split, channel_stats, prepare_data


def small(**changes) -> DataSettings:
    base = {"image_size": 16, "train_per_class": 10, "val_per_class": 4, "test_per_class": 4}
    return DataSettings(**{**base, **changes})


def test_prepared_splits_hold_uint8_images_with_the_per_class_counts(tiny_data: PreparedData):
    assert tiny_data.train.images.dtype == np.uint8
    assert tiny_data.train.images.shape == (48, 3, 16, 16)
    assert np.bincount(tiny_data.train.labels).tolist() == [24, 24]
    assert np.bincount(tiny_data.val.labels).tolist() == [8, 8]
    assert np.bincount(tiny_data.test.labels).tolist() == [8, 8]
    assert tiny_data.class_names == ("cat", "dog")
    assert tiny_data.image_size == 16 and tiny_data.num_classes == 2


def test_the_same_seed_draws_the_same_images_and_another_seed_does_not():
    first, again, other = prepare_data(small()), prepare_data(small()), prepare_data(small(seed=1))
    assert np.array_equal(first.train.images, again.train.images)
    assert np.array_equal(first.test.images, again.test.images)
    assert not np.array_equal(first.train.images, other.train.images)


def test_growing_the_training_set_leaves_validation_and_test_images_unchanged():
    fewer, more = prepare_data(small(train_per_class=5)), prepare_data(small(train_per_class=12))
    assert np.array_equal(fewer.val.images, more.val.images)
    assert np.array_equal(fewer.test.images, more.test.images)


def test_no_image_is_in_two_splits(tiny_data: PreparedData):
    def keys(split: Split) -> set[bytes]:
        return {image.tobytes() for image in split.images}

    train, val, test = keys(tiny_data.train), keys(tiny_data.val), keys(tiny_data.test)
    assert not (train & val) and not (train & test) and not (val & test)


def test_channel_stats_match_numpy_on_the_whole_array():
    images = np.random.default_rng(0).integers(0, 256, (37, 3, 5, 5), dtype=np.uint8)
    mean, std = channel_stats(images, chunk=8)
    scaled = images / 255.0
    assert np.allclose(mean, scaled.mean(axis=(0, 2, 3)))
    assert np.allclose(std, scaled.std(axis=(0, 2, 3)))


def test_a_split_refuses_images_that_are_not_uint8_nchw():
    with pytest.raises(ValueError, match="uint8"):
        Split(np.zeros((2, 16, 16, 3), dtype=np.uint8), np.zeros(2, dtype=np.int64))
