"""Whether a config's throughput belongs to the config: one config run six times as a
search's trials, once one trial at a time and once three trials to two cores (three
one-thread processes on two cores stand in for trials packed on a card), with the speed
timed in the device's gate and read over the speed reference on the search's scale (the
default, `trainables.speed_reference`), timed in the gate and read at the moments it ran
(`search.speed_reference=false`), and without timing (`train.speed_precision=0`: the
epoch's images over its wall time): `--timings` picks, each round takes them in turn.
The references are timed once, in this process, and given to every search read over
them (`train.speed_scale`), so that the searches' medians compare as the trials' do.

Printed per case: the six trials' throughputs (median, min-max spread as max/min), and
at the end the ratio of the crowded set's median to the one-at-a-time set's. The issue's
aims: the medians agree within 5% (a ratio of 0.95-1.05) and each set spreads at most 10%
(max/min <= 1.10).

With `train.speed_baseline={...}` each trial also times itself against that baseline in
alternation after its last epoch (`speed_vs_baseline`): its median and spread are printed
beside the throughput's, which tells whether a ratio to a reference config would take the
drift out of the figures, and the half width of the trials' 95% intervals in points of
speed (`--timed-only` skips the untimed searches). `--show-trials` prints each trial's start
and throughput.

    python bench/speed_consistency.py [--config configs/cats_dogs.yaml] [--trials 6]
        [--timed-only | --timings ...] [--cases "one at a time" "two to two cores" ...] [--rounds 2]
        [key.path=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml
from ablation_cost import one_search  # bench/, first on a script's path

from analysis.load import frame_from_tune, trial_spans
from trainables.metrics import METRICS
from trainables.speed_reference import measure_scales

REPO = Path(__file__).resolve().parents[1]
# The main search's knee on 2026-11-26 (docs/RESULTS.md section 8), as a fixed config.
KNEE = {"batch_size": 32, "optimizer": "sgd", "lr": 0.0006974, "accumulation_steps": 4,
        "warmup_epochs": 2}  # fmt: skip
CASES = {
    "one at a time": ["search.max_concurrent_trials=1"],
    "three to two cores": ["resources.cpu=0.66", "search.max_concurrent_trials=3"],
    # not crowded: the gate holds no neighbour (`trainables.device_gate`)
    "two to two cores": ["search.max_concurrent_trials=2"],
}
DEFAULT_CASES = ["one at a time", "three to two cores"]
TIMING = {
    # the default: timed in the gate, read over the speed reference on the search's scale
    "timed over the reference": [],
    "timed at its moments": ["search.speed_reference=false"],  # its own blocks' images/s
    "not timed (wall)": ["train.speed_precision=0"],
}


def fixed_config(source: Path, folder: Path) -> Path:
    """`source` with nothing sampled: its train settings and the knee's, no ablations and
    no early stopping (every trial runs whole)."""
    config = yaml.safe_load(source.read_text())
    config["train"] = {**config.get("train", {}), **KNEE}
    config["space"] = {}
    search = config.setdefault("search", {})
    search.update({"ablation": None, "early_stopping": None})
    path = folder / "fixed.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def trials_of(config: Path, trials: int, overrides: list[str], folder: Path) -> pd.DataFrame:
    """The search of `config` run `trials` times in `folder` (`ablation_cost.one_search`),
    one row per trial: the report's table averages repeats of a config into one."""
    one_search(str(config), [f"search.num_samples={trials}", *overrides], folder)
    return frame_from_tune(folder / "ray_results" / "bench", tuple(METRICS))


def show_trials(trials: pd.DataFrame, folder: Path) -> None:
    """Each trial's start (seconds since the search's first) and speed, in start order:
    trials that ran at once agree with each other when the machine's moment moves them."""
    spans = trial_spans(folder)
    first = min(start for start, _ in spans.values())
    starts = trials["trial_id"].astype(str).map(lambda trial: spans[trial][0] - first)
    for start, speed in sorted(zip(starts, trials["throughput"].astype(float), strict=True)):
        print(f"    started at {start:5.1f} s: {speed:6.0f} images/s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"))
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--timed-only", action="store_true",
                        help="only the default timing (--timings: the same)")  # fmt: skip
    parser.add_argument("--timings", nargs="+", choices=list(TIMING), default=list(TIMING),
                        help="ways of timing, in turn within each round")  # fmt: skip
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=DEFAULT_CASES,
                        help="how the trials share the node, in this order")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1,
                        help="the cases in turn this many times (A B A B ...)")  # fmt: skip
    parser.add_argument("--show-trials", action="store_true",
                        help="each trial's start (s since the first) and throughput")  # fmt: skip
    parser.add_argument("overrides", nargs="*", help="key.path=value for every search")
    args = parser.parse_args(argv)
    rows = []
    timings = list(TIMING)[:1] if args.timed_only else args.timings
    # one scale for every search read over the reference, as a user comparing searches
    # gives it (train.speed_scale): else each search's own, timed at its own moment
    scales = measure_scales(threads=1)
    written = ", ".join(f"{kind}: {images_per_s:.1f}" for kind, images_per_s in scales.items())
    print(f"speed references, images/s: {written} (train.speed_scale for every search)")
    ways = {**TIMING, "timed over the reference": [f"train.speed_scale={{{written}}}"]}
    medians: dict[tuple[str, str], list[float]] = {}  # each round's median, per timing and case
    order = [(t, c) for _ in range(args.rounds) for t in timings for c in args.cases]
    for timing, case in order:  # the ways and cases in turn, round after round
        with tempfile.TemporaryDirectory(prefix="speed-bench-") as name:
            folder = Path(name)
            config = fixed_config(Path(args.config), folder)
            started = time.perf_counter()
            trials = trials_of(config, args.trials,
                               [*CASES[case], *ways[timing], *args.overrides],
                               folder)  # fmt: skip
            seconds = time.perf_counter() - started
            if args.show_trials:
                show_trials(trials, folder / "ray_results" / "bench")
        speeds = trials["throughput"].astype(float)
        medians.setdefault((timing, case), []).append(statistics.median(speeds))
        spread = speeds.max() / speeds.min()
        rows.append({
            "timing": timing, "case": case, "median images/s": medians[timing, case][-1],
            "min": speeds.min(), "max": speeds.max(), "spread (max/min)": spread,
            "shared images/s (median)": statistics.median(
                trials.get("shared_throughput", speeds).astype(float)),
            "wall s": seconds,
        })  # fmt: skip
        print(f"{timing}, {case}: median {medians[timing, case][-1]:.0f} images/s, spread "
              f"{spread:.2f}x ({seconds:.0f} s)", flush=True)  # fmt: skip
        ratios = trials.get("speed_vs_baseline", pd.Series(dtype=float)).astype(float)
        if ratios.notna().any():
            rows[-1]["vs baseline (median)"] = ratios.median()
            rows[-1]["vs baseline spread"] = ratios.max() / ratios.min()
            # each trial's 95% interval, as +-points of speed (issue 36's aim: +-5)
            half = (trials["speed_vs_baseline_high"].astype(float)
                    - trials["speed_vs_baseline_low"].astype(float)) * 50  # fmt: skip
            rows[-1]["interval +-points (median)"] = half.median()
            rows[-1]["interval +-points (widest)"] = half.max()
            print(f"  against the baseline: median {ratios.median():.3f}, "
                  f"{ratios.min():.3f}-{ratios.max():.3f}, spread "
                  f"{ratios.max() / ratios.min():.2f}x; intervals +-{half.median():.1f} "
                  f"points (median), +-{half.max():.1f} (widest)", flush=True)  # fmt: skip
    for timing in timings:
        crowded, alone = medians.get((timing, "three to two cores")), medians.get(
            (timing, "one at a time"))  # fmt: skip
        if crowded and alone:
            ratio = statistics.median(crowded) / statistics.median(alone)  # over the rounds
            print(f"{timing}: three to two cores / one at a time = {ratio:.2f}x "
                  "(aim 0.95-1.05)")  # fmt: skip
    print(pd.DataFrame(rows).round(2).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
