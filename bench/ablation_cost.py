"""What the ablations cost and what they buy: one config searched without and with them,
side by side on one machine (`python -m search.run` as users run it, each in a fresh
folder, one after the other, `--repeats` times alternating which goes first).

Columns: wall seconds of the whole command (start-up, search, ablations, report); trials
(the search's, then the ablations'); Tune's run time of the search and of its ablations;
the rest of the wall time (`rest_s`: start-up, the ablations' plan, the report); the trial
seconds the ablations spent timing themselves against their base after their last epoch
(`alternation trial-s`; two trials share the wall clock); for the run with
ablations, the median width of the 95% intervals per metric and how many effects are told
from the seeds' noise. Printed last: each part's change by the cases' medians (the
search's and the ablations' as ratios, the rest in seconds), then the median wall time with
ablations over the median without (the issue's aim: at most 1.6).

    python bench/ablation_cost.py [--config configs/cats_dogs.yaml] [--repeats 1]
        [key.path=value ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
OFF = "search.ablation=null"


def one_search(config: str, overrides: list[str], folder: Path) -> dict[str, object]:
    """One whole search in `folder`: its wall seconds, trials, and (with ablations) effects."""
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
    report = folder / "ray_results" / "bench" / "report"
    trials = pd.read_csv(report / "trials.csv")
    row: dict[str, object] = {"wall_s": seconds, "trials": len(trials), "ablation_trials": 0}
    front = trials[trials["is_pareto"] == True]  # noqa: E712  (a column of booleans and NaN)
    row["front best_val_acc"] = float(front["best_val_acc"].max()) if len(front) else math.nan
    hypervolume = re.search(r"Hypervolume of the front: ([0-9.eE+-]+)", done.stdout)
    row["hypervolume"] = float(hypervolume.group(1)) if hypervolume else math.nan
    if "throughput_low" in trials:  # timed speeds (bench/speed_cost.py): their intervals
        width = (trials["throughput_high"] - trials["throughput_low"]) / trials["throughput"]
        row["throughput interval (% of speed)"] = 100 * float(width.median())
    # Tune's own count of each phase: the search's tuning loop, then its ablations'
    phases = re.findall(r"Total run time: ([0-9.]+) seconds", done.stdout + done.stderr)
    row["search_s"] = float(phases[0]) if phases else math.nan
    row["ablations_s"] = float(phases[1]) if len(phases) > 1 else math.nan
    # outside Tune's loops: start-up (Ray, the AMP probe, the speed scale, the data), the
    # ablations' plan, the report
    ablations = row["ablations_s"]
    row["rest_s"] = seconds - row["search_s"] - (0.0 if math.isnan(ablations) else ablations)
    row["alternation trial-s"] = alternation_seconds(folder / "ray_results" / "bench")
    if (report / "effects.csv").exists():
        effects = pd.read_csv(report / "effects.csv")
        row["ablation_trials"] = len(pd.read_csv(report / "ablations.csv"))
        widths = (effects["high"] - effects["low"]).groupby(effects["metric"], sort=False)
        row |= {f"width {metric}": width.median() for metric, width in widths}
        row["told_from_noise"] = int(effects["verdict"].isin(["raises", "lowers"]).sum())
        row["effects"] = len(effects)
    return row


def alternation_seconds(experiment: Path) -> float:
    """The seconds the ablation trials spent timing themselves against their base after
    their last epoch: each trial's last iteration less its median earlier one, summed
    (trial seconds: two trials at a time share the wall clock)."""
    total = 0.0
    for results in (experiment / "ablations").glob("*/result.json"):
        reports = [json.loads(line) for line in results.open() if line.strip()]
        timed = reports and math.isfinite(float(reports[-1].get("speed_vs_baseline") or "nan"))
        if timed and len(reports) > 1:  # noise-floor runs time no alternation
            seconds = [report["time_this_iter_s"] for report in reports]
            total += max(0.0, seconds[-1] - statistics.median(seconds[:-1]))
    return total


def side_by_side(
    config: str, cases: list[tuple[str, list[str]]], repeats: int, overrides: list[str]
) -> pd.DataFrame:
    """Each case's search (`overrides` and its own), `repeats` times, alternating which
    goes first; a row per search, printed as it ends and as a table at the end."""
    rows = []
    for repeat in range(repeats):
        for name, extra in cases if repeat % 2 == 0 else cases[::-1]:
            with tempfile.TemporaryDirectory(prefix="bench-search-") as folder:
                row = one_search(config, [*overrides, *extra], Path(folder))
            rows.append({"case": name, "repeat": repeat, **row})
            print(f"{name}, run {repeat + 1}: {row['wall_s']:.1f} s", flush=True)
    table = pd.DataFrame(rows)
    print(table.round(2).to_markdown(index=False))
    return table


def part_changes(table: pd.DataFrame, case: str, against: str) -> dict[str, float]:
    """By the medians of each case's runs: the search's and the ablations' seconds of `case`
    over `against`'s (ratios), and the rest's difference in seconds (NaN where a case has
    no such part)."""
    medians = table.groupby("case")[["search_s", "ablations_s", "rest_s"]].median()
    return {"search": medians.at[case, "search_s"] / medians.at[against, "search_s"],
            "ablations": medians.at[case, "ablations_s"] / medians.at[against, "ablations_s"],
            "rest": medians.at[case, "rest_s"] - medians.at[against, "rest_s"]}  # fmt: skip


def print_ratio(table: pd.DataFrame, case: str, against: str, aim: float) -> float:
    """The median wall time of `case` over that of `against`, printed with its aim, and
    each part's change (`part_changes`)."""
    medians = {name: statistics.median(group["wall_s"]) for name, group in table.groupby("case")}
    ratio = medians[case] / medians[against]
    changes = part_changes(table, case, against)
    times = {name: "-" if math.isnan(changes[name]) else f"{changes[name]:.2f}x"
             for name in ("search", "ablations")}  # fmt: skip
    print(f"parts, {case} against {against} (medians): the search {times['search']}, "
          f"the ablations {times['ablations']} (-: a case without), the rest "
          f"{changes['rest']:+.1f} s (start-up, the ablations' plan, the report)")  # fmt: skip
    print(f"wall time {case} / {against}: {ratio:.2f}x (aim: at most {aim:.2f}x)")
    return ratio


def ratio_main(
    argv: list[str] | None,
    description: str,
    against: tuple[str, list[str]],
    case: tuple[str, list[str]],
    aim: float,
    repeats: int,
) -> int:
    """A bench of one search with `case`'s overrides against `against`'s, side by side:
    its command line (--config, --repeats, overrides for both), the table and the ratio."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"))
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("overrides", nargs="*", help="key.path=value for both searches")
    args = parser.parse_args(argv)
    table = side_by_side(args.config, [against, case], args.repeats, args.overrides)
    print_ratio(table, case[0], against[0], aim=aim)
    return 0


def main(argv: list[str] | None = None) -> int:
    return ratio_main(argv, __doc__.splitlines()[0], ("without ablations", [OFF]),
                      ("with ablations", []), aim=1.60, repeats=1)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
