"""From how many rounds an alternation's interval should be its median's, by simulation:
alternations of two sides whose true ratio is 1, stopped as
`trainables.speed.time_in_alternation` stops them (from `MIN_ROUNDS` rounds, once the
interval's half width is within `--precision`), their interval the rounds' median's from
each `--median-from` rounds on and Student's t on the rounds' logarithms before.

A block takes 0.01 s per image times a log-normal factor (each round's log ratio spreads
by `--spread`), and with probability `--jumps` 30% longer besides (the machine jumped
during it, docs/RESULTS.md section 44). Printed per case (spread, jumps) and rule: the
rounds' mean and median, and how often the interval held the true ratio (a true 95%
interval: about 19 in 20). A seeded simulation, no timing: seconds to run.

    python bench/alternation_rules.py [--alternations 1500] [--spreads 0.03 0.04 0.05]
        [--jumps 0 0.1] [--median-from 6 9] [--precision 0.05] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable

import numpy as np

from trainables.speed import MEDIAN_ROUNDS, MIN_BLOCKS, time_in_alternation

JUMP = 1.3  # a jumped block's time over its usual


def side(rng: np.random.Generator, spread: float, jumps: float) -> list[tuple[float, Callable]]:
    """One configuration's side: each block's seconds per image, drawn."""

    def block() -> float:
        jumped = rng.random() < jumps
        return 0.01 * math.exp(rng.normal(0, spread / math.sqrt(2))) * (JUMP if jumped else 1)

    return [(1.0, block)]


def simulate(
    median_from: int,
    spread: float,
    jumps: float,
    alternations: int,
    precision: float,
    seed: int,
) -> tuple[float, float, float]:
    """(mean rounds, median rounds, share of intervals holding 1) of `alternations`."""
    rng = np.random.default_rng(seed)
    rounds, held = [], 0
    for _ in range(alternations):
        ratio = time_in_alternation(side(rng, spread, jumps), side(rng, spread, jumps),
                                    precision=precision, max_seconds=math.inf,
                                    median_from=median_from)  # fmt: skip
        rounds.append(ratio.rounds)
        held += ratio.low <= 1.0 <= ratio.high
    return statistics.fmean(rounds), statistics.median(rounds), held / alternations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alternations", type=int, default=1500)
    parser.add_argument("--spreads", type=float, nargs="+", default=[0.03, 0.04, 0.05])
    parser.add_argument("--jumps", type=float, nargs="+", default=[0.0, 0.1])
    parser.add_argument("--median-from", type=int, nargs="+",
                        default=sorted({MIN_BLOCKS, MEDIAN_ROUNDS}))  # fmt: skip
    parser.add_argument("--precision", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for spread in args.spreads:
        for jumps in args.jumps:
            for median_from in args.median_from:
                mean, median, held = simulate(median_from, spread, jumps, args.alternations,
                                              args.precision, args.seed)  # fmt: skip
                print(f"spread {spread:.0%}, jumps {jumps:.0%}, median from {median_from} "
                      f"rounds: rounds mean {mean:.2f}, median {median:g}, intervals holding "
                      f"the true ratio {held:.3f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
