"""What running out of memory costs a search, measured side by side in one run.

1. An out-of-memory trial against one normal training step: the time from starting a
   trial to its pruned report, when its first step is over the budget, divided by the
   median time of one training step of the same model at a batch that fits.
2. A search with a memory budget (configs/memory_budget.yaml): how many trials ended
   out of memory, how many were never started because the searcher knew they would not
   fit (the monotone rule, or the memory model), and what a trial that ran cost.

    python bench/oom_cost.py [--trials 16] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from analysis.load import trial_seconds
from trainables.classifier import fit_classifier
from trainables.data import DataSettings, prepare_data
from trainables.settings import TrainSettings

REPO = Path(__file__).resolve().parents[1]


def oom_trial_vs_step(repeats: int) -> None:
    data = prepare_data(DataSettings(image_size=32, train_per_class=256))
    fits = TrainSettings(batch_size=64, epochs=1, memory_budget_mb=40)
    over = fits.model_copy(update={"batch_size": 256})  # the meter says 71 MiB
    reports: list[dict[str, Any]] = []
    oom_seconds, step_seconds = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        fit_classifier(over, data, lambda m, c: reports.append(m))
        oom_seconds.append(time.perf_counter() - started)
        assert reports[-1]["status"] == "oom"
        fit_classifier(fits, data, lambda m, c: reports.append(m))
        steps = len(data.train) / reports[-1]["effective_batch_size"]
        step_seconds.append(reports[-1]["epoch_time_s"] / steps)
    oom, step = statistics.median(oom_seconds), statistics.median(step_seconds)
    print("1. An out-of-memory trial (small CNN, 32 px, budget 40 MiB, batch 256 needs 71):")
    print(f"   start to pruned report: {oom * 1000:.1f} ms (median of {repeats})")
    print(f"   one training step at batch 64: {step * 1000:.1f} ms")
    print(f"   ratio: an OOM trial costs {oom / step:.1f} training steps")


def search_with_budget(trials: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        command = [
            sys.executable, "-m", "search.run",
            "--config", str(REPO / "configs" / "memory_budget.yaml"),
            "--name", "bench", "--num-samples", str(trials),
            "search.sampler=random", "train.epochs=1",
        ]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(command, cwd=workdir, check=True, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        frame = pd.read_csv(Path(workdir) / "ray_results" / "bench" / "report" / "trials.csv")
        durations = trial_seconds(Path(workdir) / "ray_results" / "bench")
    counts = frame["status"].value_counts()
    frame["seconds"] = frame["trial_id"].map(durations)
    by_status = frame.groupby("status")["seconds"].median()
    print(f"2. A search of {trials} trials under a 40 MiB budget ({elapsed:.0f} s in all):")
    for status in ("ok", "oom"):
        median = by_status.get(status, float("nan"))
        print(f"   {status:14s} {counts.get(status, 0):3d} trials, median {median:.2f} s each")
    never = counts.get("oom_predicted", 0)
    print(f"   oom_predicted  {never:3d} configs, never started (no worker, 0 s)")
    print(f"   never started: {never} of {counts.get('oom', 0) + never} over-budget configs")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--trials", type=int, default=16, help="trials in the budgeted search")
    parser.add_argument(
        "--repeats", type=int, default=5, help="timings per measurement (the median is printed)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    oom_trial_vs_step(args.repeats)
    search_with_budget(args.trials)


if __name__ == "__main__":
    main()
