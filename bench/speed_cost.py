"""What timing each config's speed costs a search: the main search with its timing windows
(the default) and without (`train.speed_precision=0`), side by side on one machine, each
`python -m search.run` in a fresh folder, `--repeats` times alternating which goes first.

Printed per run: its wall seconds, and for the timed run the median relative width of the
trials' throughput intervals; at the end the ratio of the median wall times, timed over
untimed (the issue's aim: at most 1.10).

    python bench/speed_cost.py [--config configs/cats_dogs.yaml] [--repeats 2]
        [key.path=value ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
UNTIMED = "train.speed_precision=0"


def one_search(config: str, overrides: list[str], folder: Path) -> dict[str, float]:
    command = [
        sys.executable, "-m", "search.run", "--config", config, "--name", "bench",
        f"run.storage_path={folder / 'ray_results'}",
        f"tracking.uri=sqlite:///{folder / 'mlflow.db'}", *overrides,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    trials = pd.read_csv(folder / "ray_results" / "bench" / "report" / "trials.csv")
    row = {"wall_s": seconds, "trials": float(len(trials))}
    if "throughput_low" in trials:
        width = (trials["throughput_high"] - trials["throughput_low"]) / trials["throughput"]
        row["median interval width (% of speed)"] = 100 * float(width.median())
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="key.path=value for both searches")
    args = parser.parse_args(argv)
    rows = []
    cases = [("untimed", [UNTIMED]), ("timed", [])]
    for repeat in range(args.repeats):
        for name, extra in cases if repeat % 2 == 0 else cases[::-1]:
            with tempfile.TemporaryDirectory(prefix="speed-cost-") as folder:
                row = one_search(args.config, [*args.overrides, *extra], Path(folder))
            rows.append({"case": name, "repeat": repeat, **row})
            print(f"{name}, run {repeat + 1}: {row['wall_s']:.1f} s", flush=True)
    table = pd.DataFrame(rows)
    print(table.round(2).to_markdown(index=False))
    medians = {name: statistics.median(group["wall_s"]) for name, group in table.groupby("case")}
    ratio = medians["timed"] / medians["untimed"]
    print(f"wall time timed / untimed: {ratio:.2f}x (aim: at most 1.10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
