"""Whether a fixed reference workload tracks this machine's speed: a config's steps and two
references' steps interleaved (config, reference, reference, config, ...) in one process for
`--windows` windows of `--seconds`, each window read as the median images per second of each,
and the config's speed over each reference's.

The host's speed moves between moments (docs/RESULTS.md, section 44), so a trial's own
speed, timed at its moment, carries the moment. If a reference timed next to the trial's
steps moves with them, the config's speed over the reference's is the config's, whatever
the moment. Printed per window: the three speeds and the two ratios; at the end, each
column's largest over its smallest window (the spread a config's own figure has across
these moments, and what is left of it against each reference). One thread, the trials'
held allocator (`trainables.host_memory`), learning rate 0 (the same work every step).

    python bench/reference_tracking.py [--windows 16] [--seconds 8]
        [--batch-size 128] [--amp] [--channels-last] [--reference-batch 32] [--neighbour]
        [--neighbour-batch 128] [--neighbour-amp] [--neighbour-channels-last]

`--neighbour`: every other window runs beside a busy process on the other core (the small
CNN, by default at batch 128 in float32, as a trial beside it would be; `--neighbour-batch`,
`--neighbour-amp` and `--neighbour-channels-last` make it another trial's kind), the others
alone (A B A B), and the end says each column's median alone and beside: a reference that
moves as the config does keeps the ratio where a neighbour moves both. Two runs with two
kinds of neighbour say whether what a neighbour costs the config depends on its kind more
than what it costs the reference.

The config defaults to float32 at batch 128; `--amp --channels-last` is the knee of the
default search on this machine (docs/RESULTS.md, section 43). The references: the small CNN
at `--reference-batch` in float32, and the same with AMP and channels-last.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
from alternation_estimators import one_step  # bench/, first on a script's path

from trainables.host_memory import hold_host_allocator


def window(steps: dict[str, tuple[int, Callable[[], float]]], seconds: float) -> dict[str, float]:
    """The steps (each: its batch, its step) interleaved for `seconds`: each one's median
    images per second."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    ended = time.perf_counter() + seconds
    while time.perf_counter() < ended:
        for name, (_, step) in steps.items():
            times[name].append(step())
    return {name: steps[name][0] / statistics.median(values) for name, values in times.items()}


def describe(batch: int, amp: bool, channels_last: bool) -> str:
    """A step's kind in words: "the small CNN at batch 16, bf16 autocast, channels-last"."""
    kind = ["bf16 autocast" if amp else "float32", "channels-last" if channels_last else ""]
    return ", ".join([f"the small CNN at batch {batch}", *filter(None, kind)])


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """The config's kind: --batch-size (128), --amp, --channels-last."""
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--channels-last", action="store_true")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0, help="per window")
    add_config_arguments(parser)
    parser.add_argument("--reference-batch", type=int, default=32)
    parser.add_argument("--neighbour", action="store_true",
                        help="every other window beside a busy process (A B A B)")  # fmt: skip
    parser.add_argument("--neighbour-batch", type=int, default=128)
    parser.add_argument("--neighbour-amp", action="store_true")
    parser.add_argument("--neighbour-channels-last", action="store_true")
    parser.add_argument("--busy", action="store_true", help=argparse.SUPPRESS)  # the neighbour
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    hold_host_allocator()
    neighbour_kind = (args.neighbour_batch, args.neighbour_amp, args.neighbour_channels_last)
    if args.busy:  # a neighbour's steps, until it is ended; it says when they run
        step = one_step(*neighbour_kind)
        step()
        print("busy", flush=True)
        while True:
            step()
    if args.neighbour:
        print(f"neighbour: {describe(*neighbour_kind)}", flush=True)
    busy = [sys.executable, __file__, "--busy", "--neighbour-batch", str(args.neighbour_batch)]
    busy += ["--neighbour-amp"] * args.neighbour_amp
    busy += ["--neighbour-channels-last"] * args.neighbour_channels_last
    steps = {
        "config": (args.batch_size, one_step(args.batch_size, args.amp, args.channels_last)),
        "reference float32": (args.reference_batch, one_step(args.reference_batch)),
        "reference amp": (args.reference_batch, one_step(args.reference_batch, True, True)),
    }
    columns: dict[str, list[float]] = {}
    beside: dict[str, list[float]] = {}  # the windows beside a neighbour's, per column
    for number in range(args.windows):
        neighbour = None
        if args.neighbour and number % 2:
            neighbour = subprocess.Popen(busy, stdout=subprocess.PIPE, text=True)
            neighbour.stdout.readline()  # its first step done (torch imported, warmed up)
        try:
            speeds = window(steps, args.seconds)
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait()
        read = {**speeds, **{f"config / {name}": speeds["config"] / speeds[name]
                             for name in steps if name != "config"}}  # fmt: skip
        for name, value in read.items():
            (beside if neighbour else columns).setdefault(name, []).append(value)
        where = " (beside a neighbour)" if neighbour else ""
        print(f"window {number + 1}{where}: " + ", ".join(
            f"{name} {value:.3f}" if "/" in name else f"{name} {value:.0f} images/s"
            for name, value in read.items()), flush=True)  # fmt: skip
    for name, values in columns.items():
        every = values + beside.get(name, [])
        print(f"{name}: largest / smallest window {max(every) / min(every):.3f}")
    for name, values in beside.items():
        alone, near = statistics.median(columns[name]), statistics.median(values)
        print(f"{name}: median alone {alone:.3f}, beside a neighbour {near:.3f}, "
              f"beside / alone {near / alone:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
