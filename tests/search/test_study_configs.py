"""The seed studies as shipped configs: they run here, shrunk, and the GPU one says why not."""

import csv

import pandas as pd
import pytest
import torch

from search import capacity
from search.run import main
from tests.conftest import CONFIGS, UNSCALED

pytestmark = pytest.mark.slow
SMALL_DATA = ["data.train_per_class=60", "data.val_per_class=20", "data.test_per_class=20"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_the_gpu_study_refuses_clearly_on_a_machine_without_a_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["--config", str(CONFIGS / "deelvin_resnet50.yaml")]) == 2
    err = capsys.readouterr().err
    assert "resources.gpu: asks for 0.5 GPU per trial, but this machine has no GPU" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures with the CPU memory meter")
def test_the_gpu_studys_capacity_table_runs_on_cpu_with_the_meter(tmp_path):
    out = tmp_path / "capacity.csv"
    args = ["--config", str(CONFIGS / "deelvin_resnet50.yaml"), "--out", str(out), "--steps", "1"]
    # 64 px and a small host limit keep it quick; the ranking is the study's.
    assert capacity.main([*args, "--host-limit-mb", "300", "data.image_size=64"]) == 0
    batch = {row["technique"]: int(row["max_batch_size"]) for row in csv.DictReader(out.open())}
    assert batch["AMP"] > 1.5 * batch["baseline"]
    assert batch["activation checkpointing"] > batch["baseline"]
    assert batch["AMP + activation checkpointing + channels-last"] > batch["AMP"]
    assert (
        batch["AMP + activation checkpointing + channels-last + accumulation x2"]
        == batch["AMP + activation checkpointing + channels-last"]
    )


@pytest.mark.ray
@pytest.mark.parametrize(
    ("config", "grid", "shrink"),
    [
        ("paperspace_sgd_adam.yaml", 8, ["space.batch_size={grid: [16, 256]}"]),
        ("adabatch.yaml", 4, ["space.adabatch_growth={grid: [2]}", "train.adabatch_interval=1"]),
    ],
)
def test_the_cpu_studies_run_shrunk_to_one_seed_and_two_epochs(
    ray_instance, config, grid, shrink, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    args = ["--config", str(CONFIGS / config), "--name", "study", "--num-samples", str(grid)]
    # without the ablations the studies run after their search (tests/search/
    # test_ablation_search.py runs them): on this data they took longer than the search
    code = main([*args, *shrink, *SMALL_DATA, "search.repeats=1", "train.epochs=2",
                 "search.ablation=null", UNSCALED])  # fmt: skip
    assert code == 0
    trials = pd.read_csv(tmp_path / "ray_results" / "study" / "report" / "trials.csv")
    assert len(trials) == grid and set(trials["status"]) == {"ok"}  # every grid point ran
    # The AdaBatch study measures every trial's noise scale: measured in each with two
    # steps an epoch or more (an epoch's first step trains whole, so one step gives none).
    # The Paperspace study does not ask for it: nothing is split, nothing measured.
    several_steps = trials["train_steps"] / trials["epoch"] >= 2
    assert several_steps.sum() >= grid / 2
    measured = config == "adabatch.yaml"
    assert (trials.loc[several_steps, "noise_scale"] > 0).all() == measured
    assert trials.loc[~several_steps, "noise_scale"].isna().all()
    assert (tmp_path / "ray_results" / "study" / "report" / "noise_scale.png").exists() == measured
