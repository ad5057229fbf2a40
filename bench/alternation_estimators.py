"""How precisely an alternation can tell two sides apart on this machine: two identical
models of the small CNN (an A/A alternation, whose true ratio is 1) timed in blocks, A B
then B A, for `--seconds` per block length, the block lengths themselves in rotation.

Per block length, printed: the rounds, and for two ways of reading a round, the standard
deviation of its log ratio and the 95% half width over the rounds (points of speed):
`sum`, each block's total time (what `trainables.speed.time_in_alternation` reads), and
`median step`, each block's median step time (robust to a step the machine stalled).
Then, per block length, median step's half width over sum's. One thread, the trials' held
allocator (`trainables.host_memory`), learning rate 0 (the same work every step).

    python bench/alternation_estimators.py [--batch-size 64] [--blocks 0.1 0.2 0.4 0.8]
        [--seconds 8] [--repeats 2]
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

from trainables.host_memory import hold_host_allocator
from trainables.models import small_cnn
from trainables.speed import geometric_interval

IMAGE_SIZE = 32


def one_step(batch_size: int) -> Callable[[], float]:
    """A fresh small CNN's training step at learning rate 0; returns its seconds."""
    model = small_cnn(num_classes=2, image_size=IMAGE_SIZE)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0)
    images = torch.randn(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE)
    labels = torch.randint(0, 2, (batch_size,))

    def step() -> float:
        started = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
        return time.perf_counter() - started

    for _ in range(3):  # allocations, the first kernels
        step()
    return step


def half_width(ratios: list[float]) -> tuple[float, float]:
    """(sd of the log ratios, the 95% half width of their mean on the log scale), the
    interval as `trainables.speed.paired_ratio` gives an alternation's."""
    if len(ratios) < 2:
        return math.nan, math.nan
    mean, _, high = geometric_interval(ratios)
    return float(np.log(np.asarray(ratios)).std(ddof=1)), math.log(high / mean)


def alternate(
    sides: list[Callable[[], float]], block_seconds: float, seconds: float
) -> dict[str, list[float]]:
    """A/A rounds for `seconds`: each round's ratio read as block sums and as median steps."""
    per_step = statistics.median(sides[0]() for _ in range(3))
    steps = max(1, round(block_seconds / per_step))
    ratios: dict[str, list[float]] = {"sum": [], "median step": []}
    ended = time.perf_counter() + seconds
    while time.perf_counter() < ended:
        order = (0, 1) if len(ratios["sum"]) % 2 == 0 else (1, 0)
        times: dict[int, list[float]] = {}
        for side in order:
            times[side] = [sides[side]() for _ in range(steps)]
        ratios["sum"].append(sum(times[0]) / sum(times[1]))
        ratios["median step"].append(statistics.median(times[0]) / statistics.median(times[1]))
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--blocks", type=float, nargs="+", default=[0.1, 0.2, 0.4, 0.8],
                        help="block lengths, seconds")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=8.0, help="per block length a repeat")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    hold_host_allocator()
    sides = [one_step(args.batch_size), one_step(args.batch_size)]
    widths: dict[float, dict[str, list[float]]] = {block: {} for block in args.blocks}
    for repeat in range(args.repeats):
        blocks = args.blocks if repeat % 2 == 0 else args.blocks[::-1]
        for block in blocks:
            ratios = alternate(sides, block, args.seconds)
            line = [f"repeat {repeat + 1}, blocks of {block:g} s: {len(ratios['sum'])} rounds"]
            for way, values in ratios.items():
                sd, half = half_width(values)
                widths[block].setdefault(way, []).append(half)
                line.append(f"{way}: sd {sd:.3f}, +-{100 * half:.1f} points")
            print("; ".join(line), flush=True)
    for block in args.blocks:
        by_sum = statistics.median(widths[block]["sum"])
        by_median = statistics.median(widths[block]["median step"])
        print(f"blocks of {block:g} s: half width, median step / sum: {by_median / by_sum:.2f}x "
              f"(+-{100 * by_median:.1f} against +-{100 * by_sum:.1f} points)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
