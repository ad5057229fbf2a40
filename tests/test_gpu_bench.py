"""`python bench/gpu.py` on a machine without a GPU: the loop part runs its stand-in (every
code path of it), and each GPU-only figure says it was not measured and why."""

import csv
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the bench measures for real")
def test_without_a_gpu_the_bench_runs_its_stand_in_and_names_what_it_could_not_measure(tmp_path):
    out = tmp_path / "gpu.csv"
    finished = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu.py"), "--out", str(out), "--epochs", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert finished.stdout.startswith("device: CPU (no GPU: a stand-in run)")
    rows = list(csv.DictReader(out.open()))
    measured = {row["measurement"]: row for row in rows if row["value"]}
    for loop, label in (("bare loop", "fp32"), ("bare loop", "AMP"),
                        ("tuned loop", "channels_last + AMP")):  # fmt: skip
        for part in (loop, "trainable training part", "trainable whole run"):
            assert float(measured[f"{part}, {label}"]["value"]) > 0
        assert f"x the {loop}" in measured[f"trainable training part, {label}"]["note"]
        assert f"x the {loop}'s whole run" in measured[f"trainable whole run, {label}"]["note"]
    for combination in (
        "fp32",
        "AMP",
        "activation checkpointing",
        "AMP + activation checkpointing",
    ):
        assert 0 <= float(measured[f"line MAPE, {combination}, batches 16-512"]["value"]) < 5
    missing = {row["part"] for row in rows if not row["value"]}
    # "loop": its compiled row
    assert missing == {"card", "capacity", "packing", "by_memory", "oom", "loop"}
    assert all("needs a GPU" in row["note"] for row in rows if not row["value"])
    assert "not here" in finished.stdout
