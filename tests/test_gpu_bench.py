"""`python bench/gpu.py` on a machine without a GPU: the loop part runs its stand-in (every
code path of it), and each GPU-only figure says it was not measured and why."""

import csv
import importlib.util
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
        # the stand-in's peak is the meter's own
        meter = measured[f"the driver's CPU meter / the peak, {combination}"]
        assert float(meter["value"]) == pytest.approx(1.0, abs=0.05)
    missing = {row["part"] for row in rows if not row["value"]}
    # "loop": its compiled row
    assert missing == {"card", "capacity", "packing", "by_memory", "oom", "loop"}
    assert all("needs a GPU" in row["note"] for row in rows if not row["value"])
    assert "not here" in finished.stdout


def gpu_bench():
    """bench/gpu.py as a module (it imports bench/on_device.py, beside it)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("gpu_bench", REPO / "bench" / "gpu.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "bench"))
    return module


def test_a_packed_searchs_most_trials_at_once_are_read_from_its_progress_lines():
    log = (
        "== 0 s: 0 of 12 trials ended; 1 PENDING ==\n"
        "== 45 s: 3 of 12 trials ended; 3 RUNNING, 1 PENDING, 3 TERMINATED ==\n"
        "== 1 min 00 s: 6 of 12 trials ended; 11 RUNNING, 1 PENDING, 6 TERMINATED ==\n"
    )
    assert gpu_bench().most_running(log) == 11
    assert gpu_bench().most_running("") == 0
