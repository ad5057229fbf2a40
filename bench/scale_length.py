"""How long a search needs to time its speed scale: `trainables.speed_reference.measure_scales`
(every reference kind's images per second, the kinds' blocks in turn, as a search times its
`speed_scale` before its first trial) at several lengths, the lengths in turn (reversed
every other round), `--rounds` times, in one process whose allocator is held as a trial's.

Printed per round and length: each kind's images per second; at the end, per length and
kind, the median and the standard deviation of the logarithm across rounds. Rounds a few
seconds apart differ by the machine's moment as well as by the timing's own noise: where a
shorter timing spreads no more than a longer one, the moment decides the scale, not the
timing's length, and the search can start its trials sooner.

    python bench/scale_length.py [--seconds 3 1.5 1] [--rounds 6] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
from process_spread import log_sd  # bench/, first on a script's path

from trainables.host_memory import hold_host_allocator
from trainables.speed_reference import measure_scales


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, nargs="+", default=[3.0, 1.5, 1.0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.rounds < 2 or min(args.seconds) <= 0:
        parser.error("--rounds is at least 2 (a spread needs two) and every --seconds above 0")
    hold_host_allocator()  # as a trial's process and the search's scale task hold it
    torch.set_num_threads(args.threads)
    scales: dict[float, list[dict[str, float]]] = {length: [] for length in args.seconds}
    for round_number in range(args.rounds):
        lengths = args.seconds if round_number % 2 == 0 else args.seconds[::-1]
        for length in lengths:
            scale = measure_scales(args.threads, length)
            scales[length].append(scale)
            each = ", ".join(f"{kind} {rate:.0f}" for kind, rate in scale.items())
            print(f"round {round_number + 1}, {length:g} s: {each}", flush=True)
    for length, rounds in scales.items():
        for kind in rounds[0]:
            values = [scale[kind] for scale in rounds]
            print(f"{length:g} s, {kind}: median {statistics.median(values):.0f} images/s, "
                  f"sd of the logarithm {100 * log_sd(values):.2f}%")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
