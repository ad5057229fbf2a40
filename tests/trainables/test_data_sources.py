"""Which source a config names, how its settings are checked, and what `auto` and
`oxford_pets` do when the images are there and when they are not."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pydantic import ValidationError

from tests.conftest import REPO
from trainables.data import DataSettings, DataUnavailable, prepare_data
from trainables.data import oxford as oxford_module
from trainables.data.example_folders import write_pet_folder
from trainables.data.synthetic import draw_image

SMALL = {"image_size": 16, "train_per_class": 4, "val_per_class": 2, "test_per_class": 2}


def test_an_image_folder_without_root_is_refused_at_data_root():
    with pytest.raises(ValidationError) as caught:
        DataSettings(source="image_folder")
    (error,) = caught.value.errors()
    assert error["loc"] == ("root",)
    assert "is required when source is 'image_folder'" in error["msg"]
    assert "got None" in error["msg"]


def test_train_per_class_all_is_refused_for_drawn_images_and_taken_for_folders():
    with pytest.raises(ValidationError, match="'all' needs a set of image files"):
        DataSettings(train_per_class="all")
    assert DataSettings(source="image_folder", root="x", train_per_class="all")


@pytest.mark.parametrize("value", [0, "most", 2.5])
def test_a_bad_train_per_class_is_one_problem_stating_the_rule(value):
    with pytest.raises(ValidationError) as caught:
        DataSettings(source="image_folder", root="x", train_per_class=value)
    (error,) = caught.value.errors()
    assert error["loc"] == ("train_per_class",)
    assert str(error["ctx"]["error"]) == f"must be a whole number > 0 or 'all', got {value!r}"


def test_a_relative_root_resolves_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = DataSettings(source="image_folder", root="PetImages", cache_dir="cache")
    assert settings.root_path() == tmp_path / "PetImages"
    assert settings.cache_path() == tmp_path / "cache"


def test_synthetic_data_says_it_is_synthetic():
    data = prepare_data(DataSettings(**SMALL))
    assert data.source == "synthetic"
    assert data.description.startswith("synthetic")


def test_auto_uses_the_image_folder_when_it_has_class_folders_with_images(tmp_path):
    write_pet_folder(tmp_path / "PetImages", per_class=8)
    data = prepare_data(
        DataSettings(
            source="auto", root=str(tmp_path / "PetImages"), cache_dir=str(tmp_path), **SMALL
        )
    )
    assert data.source == "image_folder"
    assert data.description.startswith(f"auto chose image_folder {tmp_path / 'PetImages'}")


@pytest.mark.parametrize("layout", ["missing", "empty class folders", "no root"])
def test_auto_falls_back_to_synthetic_without_an_image_folder(tmp_path, layout):
    root = tmp_path / "PetImages"
    if layout == "empty class folders":
        (root / "Cat").mkdir(parents=True)
        (root / "Dog").mkdir()
        (root / "Dog" / "notes.txt").write_text("photos to come")
    settings = DataSettings(source="auto", root=None if layout == "no root" else str(root), **SMALL)
    data = prepare_data(settings)
    assert data.source == "synthetic"
    assert data.description.startswith("auto chose synthetic")
    assert ("no root given" if layout == "no root" else str(root)) in data.description


def test_auto_with_all_falls_back_to_the_default_count_of_drawn_images(tmp_path):
    settings = DataSettings(
        source="auto",
        root=str(tmp_path),
        image_size=16,
        train_per_class="all",
        val_per_class=1,
        test_per_class=1,
    )
    data = prepare_data(settings)
    default = DataSettings.model_fields["train_per_class"].default
    assert np.bincount(data.train.labels).tolist() == [default, default]


def closed_port() -> int:
    """A loopback port nothing listens on: connecting to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_oxford_pets_without_the_data_set_or_a_network_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(oxford_module, "DOWNLOAD_HOST", ("127.0.0.1", closed_port()))
    root = tmp_path / "pets"
    with pytest.raises(DataUnavailable) as caught:
        prepare_data(DataSettings(source="oxford_pets", root=str(root), cache_dir=str(tmp_path)))
    message = str(caught.value)
    assert f"not at {root / 'oxford-iiit-pet'}" in message
    assert "cannot be downloaded: 127.0.0.1 is unreachable" in message
    assert "'image_folder'" in message and "'synthetic'" in message
    assert isinstance(caught.value, ValueError)


def write_oxford_pets(root: Path, per_species: int) -> None:
    """The layout torchvision's OxfordIIITPet reads: images/ and annotations/{split}.txt,
    each line `image_id class_id species breed_id` (species 1 = cat, 2 = dog)."""
    base = root / "oxford-iiit-pet"
    (base / "images").mkdir(parents=True)
    (base / "annotations").mkdir()
    lines = {"trainval": [], "test": []}
    for species, breed in ((1, "Abyssinian"), (2, "beagle")):
        for index in range(per_species):
            image_id = f"{breed}_{index}"
            pixels = draw_image(species - 1, 32, np.random.default_rng([species, index]))
            Image.fromarray(pixels).save(base / "images" / f"{image_id}.jpg")
            split = "test" if index % 3 == 0 else "trainval"
            lines[split].append(f"{image_id} {species} {species} {index + 1}")
    for split, rows in lines.items():
        (base / "annotations" / f"{split}.txt").write_text("\n".join(rows) + "\n")


def test_oxford_pets_found_on_disk_is_decoded_as_cats_versus_dogs(tmp_path):
    write_oxford_pets(tmp_path / "pets", per_species=10)
    data = prepare_data(
        DataSettings(
            source="oxford_pets", root=str(tmp_path / "pets"), cache_dir=str(tmp_path), **SMALL
        )
    )
    assert data.source == "oxford_pets"
    assert data.class_names == ("Cat", "Dog")
    assert np.bincount(data.train.labels).tolist() == [4, 4]
    assert data.description.startswith(f"oxford_pets {tmp_path / 'pets' / 'oxford-iiit-pet'}")


def test_a_trial_of_the_seed_studys_model_loads_neither_torchvision_nor_meta_kernels():
    # torchvision's import loads torch._dynamo, and the meta device's first forward loads
    # sympy and hundreds of modules more: each over a second, in the search and in every
    # worker. The small CNN needs neither (only Oxford-IIIT Pet and large models do).
    probe = (
        "import sys, trainables.classifier, trainables.data.preparation\n"
        "from trainables.models import build_model, check_model\n"
        "check_model('small_cnn', 2, 32)\n"
        "build_model('small_cnn', 2, 32)\n"
        "print([name for name in ('torchvision', 'sympy') if name in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
