"""The decoded-image cache: made once per folder contents and size, reused without
decoding, rebuilt when the folder changes, and decoded once by processes that race."""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
from logging.handlers import QueueHandler
from pathlib import Path

import numpy as np
import pytest

from trainables.data import DataSettings, default_cache_dir, prepare_data
from trainables.data import cache as cache_module
from trainables.data.decode import decode_image
from trainables.data.example_folders import PetFolder, Quirks, folder_settings, write_pet_folder
from trainables.data.folder import list_image_folder


@pytest.fixture
def folder(tmp_path: Path) -> PetFolder:
    return write_pet_folder(tmp_path / "PetImages", per_class=14, quirks=Quirks())


SIZES = dict(
    image_size=16, train_per_class=8, val_per_class=4, test_per_class=4
)  # px and images per class


def settings(folder: PetFolder, cache_dir: Path, **changes) -> DataSettings:
    return folder_settings(folder, cache_dir, **{**SIZES, **changes})


class CountingDecoder:
    """Stands in for `decode_image` and counts the files it decodes."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, path: Path, size: int):
        self.calls += 1
        return decode_image(path, size)


@pytest.fixture
def decoder(monkeypatch) -> CountingDecoder:
    counting = CountingDecoder()
    monkeypatch.setattr(cache_module, "decode_image", counting)
    return counting


def files_in(folder: PetFolder) -> int:
    return sum(1 for path in folder.root.rglob("*") if path.is_file())


def entries(cache_dir: Path) -> list[Path]:
    return sorted(path for path in (cache_dir / "decoded").iterdir() if path.is_dir())


def test_a_second_prepare_reads_the_cache_without_decoding(folder, tmp_path, monkeypatch):
    first = prepare_data(settings(folder, tmp_path / "cache"))

    def no_decoding(path, size):
        raise AssertionError(f"{path} was decoded again")

    monkeypatch.setattr(cache_module, "decode_image", no_decoding)
    second = prepare_data(settings(folder, tmp_path / "cache"))
    assert "decoded now" in first.description and "cache reused" in second.description
    assert np.array_equal(first.train.images, second.train.images)
    assert np.array_equal(first.test.labels, second.test.labels)


def test_another_seed_or_split_size_reuses_the_decoded_images(folder, tmp_path, decoder):
    prepare_data(settings(folder, tmp_path / "cache"))
    prepare_data(settings(folder, tmp_path / "cache", seed=3, train_per_class="all"))
    assert decoder.calls == files_in(folder)
    assert len(entries(tmp_path / "cache")) == 1


def test_another_image_size_is_decoded_into_its_own_entry(folder, tmp_path, decoder):
    prepare_data(settings(folder, tmp_path / "cache"))
    prepare_data(settings(folder, tmp_path / "cache", image_size=20))
    names = [entry.name for entry in entries(tmp_path / "cache")]
    assert sorted(name.split("-")[1] for name in names) == ["16px", "20px"]


def test_adding_a_file_rebuilds_the_cache(folder, tmp_path, decoder):
    before = prepare_data(settings(folder, tmp_path / "cache", train_per_class="all"))
    shutil.copy(folder.root / "Dog" / "0.jpg", folder.root / "Dog" / "new.jpg")
    after = prepare_data(settings(folder, tmp_path / "cache", train_per_class="all"))
    assert "decoded now" in after.description
    assert len(after.train) == len(before.train) + 1
    assert len(entries(tmp_path / "cache")) == 2


def test_removing_a_file_rebuilds_the_cache(folder, tmp_path, decoder):
    before = prepare_data(settings(folder, tmp_path / "cache", train_per_class="all"))
    (folder.root / "Cat" / "3.jpg").unlink()
    after = prepare_data(settings(folder, tmp_path / "cache", train_per_class="all"))
    assert "decoded now" in after.description
    assert len(after.train) == len(before.train) - 1


def test_modifying_a_file_rebuilds_the_cache(folder, tmp_path, decoder):
    prepare_data(settings(folder, tmp_path / "cache"))
    calls = decoder.calls
    path = folder.root / "Cat" / "3.jpg"
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    prepare_data(settings(folder, tmp_path / "cache"))
    assert decoder.calls == 2 * calls


def test_decoding_and_reuse_are_logged_in_one_line_each(folder, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="trainables.data")
    prepare_data(settings(folder, tmp_path / "cache"))
    prepare_data(settings(folder, tmp_path / "cache"))
    (entry,) = entries(tmp_path / "cache")
    kept = 14 * 2 + 5 * 2  # clean + converted per class
    assert caplog.messages[0].startswith(f"decoded {kept} images of {folder.root} at 16 px in ")
    assert caplog.messages[0].endswith(f" s (6 skipped; manifest: {entry / 'manifest.json'})")
    assert caplog.messages[1] == f"reused cache {entry}"


def test_an_entry_holds_images_labels_files_and_manifest_and_no_leftovers(folder, tmp_path):
    prepare_data(settings(folder, tmp_path / "cache"))
    (entry,) = entries(tmp_path / "cache")
    assert sorted(path.name for path in entry.iterdir()) == [
        "images.npy",
        "index.json",
        "labels.npy",
        "manifest.json",
    ]
    images = np.load(entry / "images.npy", mmap_mode="r")
    assert images.shape == (38, 3, 16, 16) and images.dtype == np.uint8
    assert not list((tmp_path / "cache" / "decoded").glob("*.partial-*"))


def test_the_half_written_entry_of_a_crashed_process_is_cleared_and_rebuilt(folder, tmp_path):
    entry = cache_module.entry_path(list_image_folder(folder.root), 16, tmp_path / "cache")
    crashed = entry.with_name(entry.name + ".partial-99999")
    crashed.mkdir(parents=True)
    (crashed / "images.npy").write_bytes(b"half")
    data = prepare_data(settings(folder, tmp_path / "cache"))
    assert "decoded now" in data.description
    assert not crashed.exists()


def test_the_cache_defaults_to_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert DataSettings().cache_path() == tmp_path / "xdg" / "batchsearch"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "batchsearch"


# --- two processes at once ------------------------------------------------------------------


def _prepare_in_child(settings_json: str, logs, results) -> None:
    logger = logging.getLogger("trainables.data")
    logger.addHandler(QueueHandler(logs))
    logger.setLevel(logging.INFO)
    data = prepare_data(DataSettings.model_validate_json(settings_json))
    results.put((data.description, data.train.images.tobytes()))


def test_two_processes_preparing_one_folder_at_once_decode_it_once(folder, tmp_path, monkeypatch):
    """The first process to take the lock decodes, held at its first file until the second
    says it is waiting for the lock; the second then reuses what the first wrote."""
    # fork: the children inherit the gated decoder, and skip importing torch and Ray again
    context = multiprocessing.get_context("fork")
    decoding, go, decoded_files = context.Event(), context.Event(), context.Value("i", 0)

    def gated_decode(path, size):
        with decoded_files.get_lock():
            decoded_files.value += 1
        decoding.set()
        go.wait(timeout=30)
        return decode_image(path, size)

    monkeypatch.setattr(cache_module, "decode_image", gated_decode)
    logs, results = context.Queue(), context.Queue()
    job = settings(folder, tmp_path / "cache").model_dump_json()
    children = [
        context.Process(target=_prepare_in_child, args=(job, logs, results)) for _ in range(2)
    ]
    for child in children:
        child.start()
    try:
        assert decoding.wait(timeout=30)
        assert logs.get(timeout=30).getMessage().startswith("waiting for another process")
        go.set()
        outcomes = [results.get(timeout=30) for _ in children]
    finally:
        go.set()
        for child in children:
            child.join(timeout=30)
    assert [child.exitcode for child in children] == [0, 0]
    descriptions = [description for description, _ in outcomes]
    assert sum("decoded now" in description for description in descriptions) == 1
    assert sum("cache reused" in description for description in descriptions) == 1
    assert outcomes[0][1] == outcomes[1][1]
    assert decoded_files.value == files_in(folder)  # every file, once
