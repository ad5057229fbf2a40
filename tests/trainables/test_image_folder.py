"""An image folder with every quirk real folders have: each file is converted or skipped,
counted and listed; splits are per class, seeded, disjoint and sized as asked."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trainables.data import DataSettings, DataUnavailable, channel_stats, prepare_data
from trainables.data.decode import CONVERTED_GRAYSCALE, SKIPPED_UNREADABLE, decode_image
from trainables.data.example_folders import (
    NO_QUIRKS,
    PetFolder,
    Quirks,
    folder_settings,
    save_sideways_with_orientation,
    transparent_picture,
    write_pet_folder,
)
from trainables.data.synthetic import draw_image

QUIRKS = Quirks(
    empty=1,
    truncated=2,
    non_image=3,
    grayscale=1,
    cmyk=2,
    transparent=3,
    png_as_jpg=1,
    rotated=2,
)


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory) -> PetFolder:
    return write_pet_folder(
        tmp_path_factory.mktemp("messy") / "PetImages", per_class=24, quirks=QUIRKS
    )


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


SIZES = dict(
    image_size=24, train_per_class=12, val_per_class=6, test_per_class=6
)  # px and images per class


def settings(folder: PetFolder, cache_dir: Path, **changes) -> DataSettings:
    return folder_settings(folder, cache_dir, **{**SIZES, **changes})


def manifest_of(cache_dir: Path, folder: PetFolder) -> dict:
    (path,) = cache_dir.glob(f"decoded/{folder.root.name}-24px-*/manifest.json")
    return json.loads(path.read_text())


def test_every_quirky_file_is_skipped_or_converted_and_listed_with_its_reason(messy, cache_dir):
    prepare_data(settings(messy, cache_dir))
    manifest = manifest_of(cache_dir, messy)
    listed = {entry["path"]: tuple(entry["reasons"]) for entry in manifest["entries"]}
    assert listed == messy.expected
    actions = {entry["path"]: entry["action"] for entry in manifest["entries"]}
    assert {path for path, action in actions.items() if action == "skipped"} == {
        path for path, reasons in messy.expected.items() if reasons[0] in messy.skipped
    }


def test_the_manifest_totals_each_reason_overall_and_per_class(messy, cache_dir):
    prepare_data(settings(messy, cache_dir))
    manifest = manifest_of(cache_dir, messy)
    assert manifest["skipped_by_reason"] == dict(messy.skipped)
    assert manifest["converted_by_reason"] == dict(messy.converted)
    assert manifest["skipped"] == sum(messy.skipped.values())
    for name in messy.class_names:
        per_class = manifest["classes"][name]
        assert per_class["kept"] == messy.usable[name]
        assert sum(per_class["skipped"].values()) == sum(messy.skipped.values()) // 2
        assert per_class["converted"] == {
            reason: count // 2 for reason, count in messy.converted.items()
        }


def test_every_usable_image_is_kept_and_labelled_by_its_folder(messy, cache_dir):
    data = prepare_data(settings(messy, cache_dir, train_per_class="all"))
    assert data.source == "image_folder"
    assert data.class_names == ("Cat", "Dog")
    for label, name in enumerate(data.class_names):
        kept = sum(
            int((split.labels == label).sum()) for split in (data.train, data.val, data.test)
        )
        assert kept == messy.usable[name]
    assert data.train.images.dtype == np.uint8
    assert data.train.images.shape[1:] == (3, 24, 24)
    assert data.train.labels.dtype == np.int64


def test_splits_are_per_class_and_sized_as_asked(messy, cache_dir):
    data = prepare_data(settings(messy, cache_dir))
    assert np.bincount(data.train.labels).tolist() == [12, 12]
    assert np.bincount(data.val.labels).tolist() == [6, 6]
    assert np.bincount(data.test.labels).tolist() == [6, 6]


def test_all_trains_on_every_image_left_after_validation_and_test(messy, cache_dir):
    data = prepare_data(settings(messy, cache_dir, train_per_class="all"))
    assert np.bincount(data.train.labels).tolist() == [
        messy.usable["Cat"] - 12,
        messy.usable["Dog"] - 12,
    ]
    assert "all (" in data.description


def test_no_image_is_in_two_splits(messy, cache_dir):
    data = prepare_data(settings(messy, cache_dir, train_per_class="all"))
    keys = [
        {image.tobytes() for image in split.images} for split in (data.train, data.val, data.test)
    ]
    assert sum(len(k) for k in keys) == len(set().union(*keys))


def test_the_same_seed_gives_the_same_split_and_another_seed_another(messy, cache_dir):
    first, again = (
        prepare_data(settings(messy, cache_dir)),
        prepare_data(settings(messy, cache_dir)),
    )
    other = prepare_data(settings(messy, cache_dir, seed=1))
    assert np.array_equal(first.val.images, again.val.images)
    assert np.array_equal(first.train.images, again.train.images)
    assert not np.array_equal(first.val.images, other.val.images)


def test_growing_the_training_set_leaves_validation_and_test_unchanged(messy, cache_dir):
    fewer = prepare_data(settings(messy, cache_dir, train_per_class=3))
    everything = prepare_data(settings(messy, cache_dir, train_per_class="all"))
    assert np.array_equal(fewer.val.images, everything.val.images)
    assert np.array_equal(fewer.test.images, everything.test.images)
    fewer_train = {image.tobytes() for image in fewer.train.images}
    assert fewer_train <= {image.tobytes() for image in everything.train.images}


def test_normalisation_statistics_come_from_the_training_split(messy, cache_dir):
    data = prepare_data(settings(messy, cache_dir))
    assert (data.mean, data.std) == channel_stats(data.train.images)


def test_too_few_images_for_the_split_sizes_is_an_error_naming_the_class(messy, cache_dir):
    with pytest.raises(DataUnavailable, match=r"'Cat' has 3\d, .*'Dog' has 3\d, fewer than"):
        prepare_data(settings(messy, cache_dir, train_per_class=30))


def test_a_missing_folder_is_an_error_that_names_it(tmp_path):
    missing = tmp_path / "PetImages"
    with pytest.raises(DataUnavailable, match=f"no folder at {missing}"):
        prepare_data(
            DataSettings(source="image_folder", root=str(missing), cache_dir=str(tmp_path))
        )


def test_a_folder_with_one_class_is_an_error(tmp_path):
    write_pet_folder(tmp_path / "PetImages", per_class=2, class_names=("Cat",))
    with pytest.raises(DataUnavailable, match=r"at least 2 class folders.*\['Cat'\]"):
        prepare_data(
            DataSettings(
                source="image_folder", root=str(tmp_path / "PetImages"), cache_dir=str(tmp_path)
            )
        )


def test_class_folders_without_a_single_image_are_an_error(tmp_path):
    write_pet_folder(tmp_path / "PetImages", per_class=0, quirks=replace(NO_QUIRKS, non_image=2))
    settings = DataSettings(
        source="image_folder", root=str(tmp_path / "PetImages"), cache_dir=str(tmp_path)
    )
    with pytest.raises(DataUnavailable, match=r"none of the 4 files .* \{'not an image': 4\}"):
        prepare_data(settings)
    for name in ("Cat", "Dog"):
        for path in (tmp_path / "PetImages" / name).iterdir():
            path.unlink()
    with pytest.raises(DataUnavailable, match=r"no files in the class folders \['Cat', 'Dog'\]"):
        prepare_data(settings)


# --- single files: what each conversion does to the pixels ---------------------------------


def picture(width: int = 40, height: int = 40) -> Image.Image:
    pixels = draw_image(0, 40, np.random.default_rng(7))
    return Image.fromarray(pixels).resize((width, height))


def test_an_exif_rotated_photo_decodes_upright(tmp_path):
    upright, sideways = tmp_path / "upright.jpg", tmp_path / "sideways.jpg"
    photo = picture(48, 32)  # not square, so a missed rotation would also squash wrongly
    photo.save(upright, quality=95)
    save_sideways_with_orientation(photo, sideways)
    expected = decode_image(upright, 32).pixels.astype(float)
    decoded = decode_image(sideways, 32).pixels.astype(float)
    unrotated = np.rot90(expected, k=1, axes=(1, 2))
    assert np.abs(decoded - expected).mean() < 4  # JPEG noise only
    assert np.abs(decoded - unrotated).mean() > 4 * np.abs(decoded - expected).mean()


@pytest.mark.parametrize("kind", [0, 1, 2], ids=["RGBA", "LA", "palette"])
def test_transparent_pixels_are_composited_on_white(tmp_path, kind):
    path = tmp_path / "transparent.png"
    transparent_picture(picture(), kind=kind).save(path)
    pixels = decode_image(path, 20).pixels
    assert pixels[:, :, :9].min() == 255  # the transparent left half, resampling aside
    assert pixels[:, :, 11:].mean() < 250  # the opaque right half keeps the picture


def test_a_dead_symlink_is_skipped_as_unreadable(tmp_path):
    write_pet_folder(tmp_path / "PetImages", per_class=3)
    (tmp_path / "PetImages" / "Cat" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    settings = DataSettings(
        source="image_folder",
        root=str(tmp_path / "PetImages"),
        cache_dir=str(tmp_path / "cache"),
        **{"image_size": 16, "train_per_class": 1, "val_per_class": 1, "test_per_class": 1},
    )
    prepare_data(settings)
    (manifest_path,) = (tmp_path / "cache").glob("decoded/*/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["skipped_by_reason"] == {SKIPPED_UNREADABLE: 1}
    assert manifest["entries"][0]["path"] == "Cat/gone.jpg"


def test_images_are_squashed_to_the_square_size_like_keras_load_img(tmp_path):
    path = tmp_path / "wide.jpg"
    picture(90, 30).save(path)
    assert decode_image(path, 24).pixels.shape == (3, 24, 24)


def test_sixteen_bit_grayscale_is_scaled_to_eight_bits(tmp_path):
    path = tmp_path / "gray16.png"
    Image.fromarray(np.full((8, 8), 32768, dtype=np.uint16)).save(path)
    decoded = decode_image(path, 16)
    assert decoded.reasons == (CONVERTED_GRAYSCALE,)
    assert decoded.pixels.min() == decoded.pixels.max() == 128
