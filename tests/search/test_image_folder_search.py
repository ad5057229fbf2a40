"""A real, messy folder of JPEGs through whole searches: decoded once, nothing crashes."""

import json

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

import trainables.data.cache as cache_module
from search.run import main
from tests.conftest import CONFIGS, UNSCALED
from trainables.data.example_folders import NO_QUIRKS, Quirks, write_pet_folder

pytestmark = [pytest.mark.ray, pytest.mark.slow]
EVERY_QUIRK = Quirks(empty=2, truncated=2, non_image=3, grayscale=2, cmyk=2, transparent=3,
                     png_as_jpg=2, rotated=2)  # fmt: skip


def search(name: str, folder, cache, per_class=(400, 100, 100)) -> list[str]:
    """The smoke search on `folder`, taking `per_class` (train, val, test) images of each."""
    train, val, test = per_class
    return [
        "--config", str(CONFIGS / "smoke.yaml"), "--name", name,
        "data.source=image_folder", f"data.root={folder}", f"data.cache_dir={cache}",
        f"data.train_per_class={train}", f"data.val_per_class={val}",
        f"data.test_per_class={test}", UNSCALED,
    ]  # fmt: skip


def test_a_messy_folder_of_2000_jpegs_runs_whole_searches_and_is_decoded_once(
    ray_instance, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    folder = write_pet_folder(tmp_path / "PetImages", per_class=1000, quirks=EVERY_QUIRK)
    files = sum(1 for path in folder.root.rglob("*") if path.is_file())
    assert files >= 2000
    cache = tmp_path / "cache"

    assert main(search("first", folder.root, cache)) == 0
    first = capsys.readouterr().out
    assert "image_folder" in first and "decoded now" in first
    trials = pd.read_csv(tmp_path / "ray_results" / "first" / "report" / "trials.csv")
    assert set(trials["status"]) == {"ok"}  # no trial crashed on a broken file
    (manifest_path,) = cache.glob("decoded/PetImages-32px-*/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["files"] == files
    assert manifest["skipped_by_reason"] == dict(folder.skipped)  # the skip count is exact
    assert manifest["converted_by_reason"] == dict(folder.converted)

    def no_decoding(*args, **kwargs):
        raise AssertionError("the second search decoded an image")

    monkeypatch.setattr(cache_module, "decode_image", no_decoding)
    assert main(search("second", folder.root, cache)) == 0
    assert "cache reused" in capsys.readouterr().out
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("smoke")
    parents = [
        run
        for run in client.search_runs([experiment.experiment_id])
        if "mlflow.parentRunId" not in run.data.tags
    ]
    assert {run.data.tags["data_source"] for run in parents} == {"image_folder"}


def test_a_folder_of_three_classes_keeps_off_the_front_only_trials_near_its_own_chance(
    ray_instance, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    folder = write_pet_folder(
        tmp_path / "Animals", per_class=60, quirks=NO_QUIRKS, class_names=("Cat", "Dog", "Fox")
    )
    assert main(search("three", folder.root, tmp_path / "cache", per_class=(40, 10, 10))) == 0
    report = (tmp_path / "ray_results" / "three" / "report" / "report.md").read_text()
    assert "below best_val_acc 0.383 are kept off" in report  # chance 1/3 + 0.05, not 0.55
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (parent,) = client.search_runs(
        [client.get_experiment_by_name("smoke").experiment_id],
        filter_string="tags.num_classes = '3'",
    )
    assert parent.info.run_name == "three"
