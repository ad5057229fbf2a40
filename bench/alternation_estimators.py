"""How precisely, and how truly, an alternation tells two sides apart on this machine: two
identical models of the small CNN (an A/A alternation, whose true ratio is 1) timed in
blocks, A B then B A, for `--seconds` per alternation, the block lengths in rotation,
`--repeats` alternations per block length.

Each alternation's rounds (each block's total time, as `trainables.speed.time_in_alternation`
times them) are read three ways: `mean`, the geometric mean with Student's t on the
logarithms (the alternation's reading until 2026-11-28, and its interval before nine rounds
since 2026-12-07), `median`, the rounds' median with the distribution-free interval of a
median (`trainables.speed.paired_ratio` from nine rounds), and `pairs`,
rounds 1 and 2, 3 and 4, ... each read as one ratio (their geometric mean: each side timed
first once) and those pairs' median with a median's interval (which needs six pairs, twelve
rounds). Printed per alternation: its rounds, the log ratios' kurtosis (0 for a normal
distribution), how much slower a round's second block ran than its first (`second block`:
half the difference of the two orders' median log ratios; it follows the other side's
block, whose model the caches hold), and per reading the 95% half width (points of speed)
and whether the interval holds 1; per block length at the end: the half widths' medians,
median's over mean's, and how many of the intervals held 1 (a true 95% interval: about 19
in 20), of those with an interval (a median's needs six rounds), the pairs' half widths'
median, the second block's slowing (median), and how closely a round's two blocks move
together (the correlation of their logarithms, `pairing`: what timing them side by side
takes away). One thread, the trials' held allocator (`trainables.host_memory`), learning
rate 0 (the same work every step); `--amp` and `--channels-last` train both models as a
trial with those settings does.

The two models are twins (the same shapes, their weights elsewhere in memory), and twins in
one process need not run at one speed: at batch 32 with AMP and channels-last one pair ran
1.4% apart in every alternation (docs/RESULTS.md, section 59), so an interval narrower than
that may miss 1 and be right about these two models.

    python bench/alternation_estimators.py [--batch-size 64] [--amp] [--channels-last]
        [--blocks 0.03 0.1] [--seconds 4] [--repeats 6]
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
from trainables.speed import MIN_BLOCKS, geometric_interval, median_interval, paired_ratio

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
    step.model, step.optimizer = model, optimizer  # for a bench that moves them in memory
    return step


def readings(sums: list[tuple[float, float]]) -> dict[str, tuple[float, float, bool | None]]:
    """Per reading of an alternation's rounds (each round: the two sides' block totals), the
    ratio, the 95% half width (relative, from the estimate to its farther bound) and whether
    the interval holds 1 (NaN and None: too few rounds for an interval)."""
    ratios = [a / b for a, b in sums]
    by_mean = geometric_interval(ratios)
    # the rounds' median with a median's own interval: an alternation reads fewer than
    # `MEDIAN_ROUNDS` rounds by Student's t instead (`paired_ratio`), which `mean` stands for
    middle = paired_ratio([a for a, _ in sums], [b for _, b in sums]).ratio
    read = {}
    as_median = (middle, *median_interval(ratios))
    for way, (ratio, low, high) in (("mean", by_mean), ("median", as_median),
                                    ("pairs", by_pairs(ratios))):  # fmt: skip
        if math.isnan(low):
            read[way] = (ratio, math.nan, None)
        else:
            read[way] = (ratio, max(high / ratio - 1, 1 - low / ratio), low <= 1.0 <= high)
    return read


def by_pairs(ratios: list[float]) -> tuple[float, float, float]:
    """Rounds 1 and 2, 3 and 4, ... (the second of each in the reversed order) read as one
    ratio each, their geometric mean: those pairs' median and a median's interval (NaN with
    fewer than `MIN_BLOCKS` pairs; a last round without its pair left out)."""
    logs = np.log(ratios)
    count = len(logs) // 2
    pairs = np.exp((logs[0 : 2 * count : 2] + logs[1 : 2 * count : 2]) / 2)
    if count < MIN_BLOCKS:
        return (float(np.median(pairs)) if count else math.nan), math.nan, math.nan
    return float(np.median(pairs)), *median_interval(pairs.tolist())


def second_block_slowing(sums: list[tuple[float, float]]) -> float:
    """How much slower a round's second block ran than its first (0.05: 5%): rounds alternate
    the order (side 0 first, then side 1), so the second block slows side 1 in the first
    order and side 0 in the other; half the difference of the two orders' median log
    ratios, the sides' own difference cancelled (NaN with fewer than two rounds)."""
    logs = np.log([a / b for a, b in sums])
    if len(logs) < 2:
        return math.nan
    return math.exp((np.median(logs[1::2]) - np.median(logs[0::2])) / 2) - 1


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
    parser.add_argument("--amp", action="store_true", help="bf16 autocast")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--blocks", type=float, nargs="+", default=[0.03, 0.1],
                        help="block lengths, seconds")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=4.0, help="per alternation")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    hold_host_allocator()
    sides = [one_step(args.batch_size, args.amp, args.channels_last) for _ in range(2)]
    widths: dict[float, dict[str, list[float]]] = {block: {} for block in args.blocks}
    held: dict[float, dict[str, int]] = {block: {} for block in args.blocks}
    correlations: dict[float, list[float]] = {block: [] for block in args.blocks}
    slowings: dict[float, list[float]] = {block: [] for block in args.blocks}
    for repeat in range(args.repeats):
        blocks = args.blocks if repeat % 2 == 0 else args.blocks[::-1]
        for block in blocks:
            sums = alternate(sides, block, args.seconds)
            logs = np.log([a / b for a, b in sums])
            together = pairing(sums)
            if not math.isnan(together):
                correlations[block].append(together)
            slowing = second_block_slowing(sums)
            if not math.isnan(slowing):
                slowings[block].append(slowing)
            line = [f"repeat {repeat + 1}, blocks of {block:g} s: {len(sums)} rounds, "
                    f"kurtosis {stats.kurtosis(logs):.1f}, blocks' correlation "
                    f"{together:.2f}, second block {100 * slowing:+.1f}%"]  # fmt: skip
            for way, (ratio, half, holds) in readings(sums).items():
                if holds is not None:
                    widths[block].setdefault(way, []).append(half)
                    held[block][way] = held[block].get(way, 0) + holds
                said = {True: "yes", False: "no", None: "no interval"}[holds]
                line.append(f"{way}: {ratio:.3f} +-{100 * half:.1f} points, holds 1: {said}")
            print("; ".join(line), flush=True)
    for block in args.blocks:
        by_mean = statistics.median(widths[block].get("mean", [math.nan]))
        by_median = statistics.median(widths[block].get("median", [math.nan]))
        by_pair = statistics.median(widths[block].get("pairs", [math.nan]))
        counts = {way: f"{held[block].get(way, 0)} of {len(widths[block].get(way, []))}"
                  for way in ("median", "mean", "pairs")}  # fmt: skip
        print(f"blocks of {block:g} s: half width, median / mean: {by_median / by_mean:.2f}x "
              f"(+-{100 * by_median:.1f} against +-{100 * by_mean:.1f} points), pairs "
              f"+-{100 * by_pair:.1f}; intervals holding 1: median {counts['median']}, mean "
              f"{counts['mean']}, pairs {counts['pairs']}; a round's second block "
              f"{100 * statistics.median(slowings[block] or [math.nan]):+.1f}% (median); a "
              f"round's two blocks correlate at "
              f"{statistics.median(correlations[block] or [math.nan]):.2f} (median)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
