"""How precisely, and how truly, an alternation tells two sides apart on this machine: two
identical models of the small CNN (an A/A alternation, whose true ratio is 1) timed in
blocks, A B then B A, for `--seconds` per alternation, the block lengths in rotation,
`--repeats` alternations per block length.

Each alternation's rounds (each block's total time, as `trainables.speed.time_in_alternation`
times them) are read two ways: `mean`, the geometric mean with Student's t on the logarithms
(the alternation's reading until 2026-11-28), and `median`, the rounds' median with the
distribution-free interval of a median (`trainables.speed.paired_ratio`). Printed per
alternation: its rounds, the log ratios' kurtosis (0 for a normal distribution), and per
reading the 95% half width (points of speed) and whether the interval holds 1; per block
length at the end: the half widths' medians, median's over mean's, and how many of the
intervals held 1 (a true 95% interval: about 19 in 20), of those with an interval (a
median's needs six rounds), and how closely a round's two blocks move together (the
correlation of their logarithms, `pairing`: what timing them side by side takes away). One
thread, the trials' held allocator (`trainables.host_memory`), learning rate 0 (the same
work every step).

    python bench/alternation_estimators.py [--batch-size 64] [--blocks 0.03 0.1]
        [--seconds 4] [--repeats 6]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
from scipy import stats

from trainables.host_memory import hold_host_allocator
from trainables.models import small_cnn
from trainables.speed import geometric_interval, paired_ratio

IMAGE_SIZE = 32


def one_step(
    batch_size: int, amp: bool = False, channels_last: bool = False
) -> Callable[[], float]:
    """A fresh small CNN's training step at learning rate 0 (bf16 autocast with `amp`, the
    channels-last layout with `channels_last`); returns its seconds."""
    model = small_cnn(num_classes=2, image_size=IMAGE_SIZE)
    images = torch.randn(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE)
    labels = torch.randint(0, 2, (batch_size,))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0)

    def step() -> float:
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return time.perf_counter() - started

    for _ in range(3):  # allocations, the first kernels
        step()
    return step


def readings(sums: list[tuple[float, float]]) -> dict[str, tuple[float, bool | None]]:
    """Per reading of an alternation's rounds (each round: the two sides' block totals), the
    95% half width (relative, from the estimate to its farther bound) and whether the
    interval holds 1 (NaN and None: too few rounds for an interval)."""
    ratios = [a / b for a, b in sums]
    by_mean = geometric_interval(ratios)
    by_median = paired_ratio([a for a, _ in sums], [b for _, b in sums])
    read = {}
    as_median = (by_median.ratio, by_median.low, by_median.high)
    for way, (ratio, low, high) in (("mean", by_mean), ("median", as_median)):
        if math.isnan(low):
            read[way] = (math.nan, None)
        else:
            read[way] = (max(high / ratio - 1, 1 - low / ratio), low <= 1.0 <= high)
    return read


def pairing(sums: list[tuple[float, float]]) -> float:
    """The correlation of the logarithms of a round's two block totals across the rounds:
    what pairing them takes away (a ratio's variance is the two sides' less twice their
    covariance; 0: nothing, the rounds' moments move the two blocks apart); NaN with fewer
    than three rounds or a side that never moved."""
    if len(sums) < 3:
        return math.nan
    first, second = (np.log([pair[side] for pair in sums]) for side in (0, 1))
    if np.std(first) == 0 or np.std(second) == 0:
        return math.nan
    return float(np.corrcoef(first, second)[0, 1])


def alternate(
    sides: list[Callable[[], float]], block_seconds: float, seconds: float
) -> list[tuple[float, float]]:
    """A/A rounds for `seconds`: each round's two block totals (side 0's, side 1's)."""
    per_step = statistics.median(sides[0]() for _ in range(3))
    steps = max(1, round(block_seconds / per_step))
    sums: list[tuple[float, float]] = []
    ended = time.perf_counter() + seconds
    while time.perf_counter() < ended:
        order = (0, 1) if len(sums) % 2 == 0 else (1, 0)
        totals = {side: sum(sides[side]() for _ in range(steps)) for side in order}
        sums.append((totals[0], totals[1]))
    return sums


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--blocks", type=float, nargs="+", default=[0.03, 0.1],
                        help="block lengths, seconds")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=4.0, help="per alternation")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    hold_host_allocator()
    sides = [one_step(args.batch_size), one_step(args.batch_size)]
    widths: dict[float, dict[str, list[float]]] = {block: {} for block in args.blocks}
    held: dict[float, dict[str, int]] = {block: {} for block in args.blocks}
    correlations: dict[float, list[float]] = {block: [] for block in args.blocks}
    for repeat in range(args.repeats):
        blocks = args.blocks if repeat % 2 == 0 else args.blocks[::-1]
        for block in blocks:
            sums = alternate(sides, block, args.seconds)
            logs = np.log([a / b for a, b in sums])
            together = pairing(sums)
            if not math.isnan(together):
                correlations[block].append(together)
            line = [f"repeat {repeat + 1}, blocks of {block:g} s: {len(sums)} rounds, "
                    f"kurtosis {stats.kurtosis(logs):.1f}, blocks' correlation "
                    f"{together:.2f}"]  # fmt: skip
            for way, (half, holds) in readings(sums).items():
                if holds is not None:
                    widths[block].setdefault(way, []).append(half)
                    held[block][way] = held[block].get(way, 0) + holds
                said = {True: "yes", False: "no", None: "no interval"}[holds]
                line.append(f"{way}: +-{100 * half:.1f} points, holds 1: {said}")
            print("; ".join(line), flush=True)
    for block in args.blocks:
        by_mean = statistics.median(widths[block].get("mean", [math.nan]))
        by_median = statistics.median(widths[block].get("median", [math.nan]))
        counts = {way: f"{held[block].get(way, 0)} of {len(widths[block].get(way, []))}"
                  for way in ("median", "mean")}  # fmt: skip
        print(f"blocks of {block:g} s: half width, median / mean: {by_median / by_mean:.2f}x "
              f"(+-{100 * by_median:.1f} against +-{100 * by_mean:.1f} points); intervals "
              f"holding 1: median {counts['median']}, mean {counts['mean']}; a round's two "
              f"blocks correlate at {statistics.median(correlations[block] or [math.nan]):.2f} "
              "(median)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
