"""Whether a config's speed over its reference belongs to the config or also to the process
it runs in: `--processes` fresh processes, one after another and alone, each timing the
config's training steps and references' steps interleaved (config, reference, reference,
...) for `--seconds`, as a trial of its own would (one thread, the trials' held allocator,
`trainables.host_memory`, and its environment, `WORKER_ENV`; learning rate 0).

Each trial of a search, a noise-floor run among them, is a process of its own, so a speed
that moves from one process to the next by more than the reference moves sets two runs of
one config apart however long each is timed. Printed per process: the config's median
images per second and its ratio over each reference (the small CNN at each
`--reference-batch`, in the config's arithmetic); at the end, each column's largest over
its smallest process, then (with three processes or more) the standard deviation of its
logarithm and the share of threes of processes within 3% of each other, as the knee and its
two noise-floor runs would have to be. With `--env KEY=VALUE`, every other process runs
with that in its environment (A B A B, the first without), and the end gives each column's
median and spread per set: `THP_MEM_ALLOC_ENABLE=1` asks torch to back its large CPU
buffers with transparent huge pages, which the kernel gives only where asked
(`/sys/kernel/mm/transparent_hugepage/enabled` at `madvise`). `--without-onednn` trains
every process on torch's own kernels instead of oneDNN's, which oneDNN compiles for each
shape as the process runs; `--without-aslr` starts every other process without address
randomisation (`setarch -R`), so that its libraries, heap and stack begin where every such
process's do and where its buffers fall moves less from one process to the next; a
reference at the config's own batch (`--reference-batch 128`) is a twin of the config in
the process, with buffers of its own and the same shapes. `--windows N` times N windows of
`--seconds` in each process, and `--move-weights` copies the config's weights and its
optimizer's state elsewhere in memory between them (the same values and layout): the end
then compares how far one process's windows spread with how far the processes' first
windows do, and their medians (docs/RESULTS.md, section 59).

    python bench/process_spread.py [--processes 16] [--seconds 3] [--batch-size 128]
        [--amp] [--channels-last] [--reference-batch 16 64] [--env KEY=VALUE]
        [--without-onednn] [--without-aslr] [--windows 1] [--move-weights]

The config defaults to float32 at batch 128; `--amp --channels-last` is the default
search's knee on the Intel Xeon (docs/RESULTS.md, section 48).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reference_tracking import add_config_arguments, window  # bench/, first on the path

from trainables.host_memory import WORKER_ENV

if TYPE_CHECKING:
    import torch


def measure(args: argparse.Namespace) -> dict[str, object]:
    """In the child: per window (`windows`), the config's median images/s and each
    reference's, interleaved, the config's weights moved between windows with
    `--move-weights`; whether oneDNN trained them (`onednn`, 1 or 0) and whether its
    addresses were randomised (`aslr`: 0 where it was started without, `setarch -R`)."""
    import torch
    from alternation_estimators import one_step  # bench/, first on a script's path

    from trainables.host_memory import hold_host_allocator

    torch.set_num_threads(1)
    hold_host_allocator()
    torch.backends.mkldnn.enabled = not args.without_onednn
    steps = {"config": (args.batch_size, one_step(args.batch_size, args.amp, args.channels_last))}
    for batch in args.reference_batch:
        steps[f"reference {batch}"] = (batch, one_step(batch, args.amp, args.channels_last))
    windows = []
    for number in range(args.windows):
        if number and args.move_weights:
            move_weights(steps["config"][1].model, steps["config"][1].optimizer)
        windows.append(window(steps, args.seconds))
    return {"windows": windows, "onednn": float(torch.backends.mkldnn.enabled),
            "aslr": float(not addresses_fixed())}  # fmt: skip


def move_weights(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Each of the model's parameters and buffers and each tensor of the optimizer's state
    copied into a new allocation, one at a time (the old freed as the next is made): the
    same objects, values and layout, elsewhere in memory."""
    import torch

    with torch.no_grad():
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            tensor.data = tensor.data.clone()
        for state in optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.clone()


def addresses_fixed() -> bool:
    """Whether this process runs without address randomisation (Linux's personality flag
    ADDR_NO_RANDOMIZE, which `setarch -R` sets); False where /proc does not say."""
    try:
        personality = int(Path("/proc/self/personality").read_text(), 16)
    except OSError:
        return False
    return bool(personality & 0x0040000)


def ratios(speeds: dict[str, float]) -> dict[str, float]:
    """A window's speeds as the config's images/s and its ratio over each reference."""
    return {"config": speeds["config"]} | {
        f"config / {name}": speeds["config"] / speeds[name] for name in speeds if name != "config"
    }


def window_spreads(by_window: list[list[dict[str, float]]], name: str) -> str:
    """How far `name` spread across one process's windows (the root mean square over the
    processes of each one's standard deviation of the logarithm), across the processes'
    first windows, and across the processes' medians: where the spread across processes is
    each process's draw of something its windows redraw, the medians' is the windows' over
    the square root of their count."""
    logs = [[math.log(reads[name]) for reads in windows] for windows in by_window]
    within = math.sqrt(statistics.mean(statistics.variance(values) for values in logs))
    firsts = statistics.stdev(values[0] for values in logs)
    medians = statistics.stdev(statistics.median(values) for values in logs)
    return (f"sd of the logarithm across one process's windows {within:.1%}, across the "
            f"processes' first windows {firsts:.1%}, across their medians {medians:.1%} "
            f"({within / math.sqrt(len(logs[0])):.1%} if the windows redraw it all)")  # fmt: skip


def spread(values: list[float]) -> float:
    return max(values) / min(values)


def log_sd(values: list[float]) -> float:
    """The standard deviation of the values' logarithms: a relative spread."""
    return statistics.stdev(math.log(value) for value in values)


def threes_within(values: list[float], within: float = 1.03) -> float:
    """The share of every three of the values whose largest is at most `within` times their
    smallest: how often three runs of one config, each in a fresh process (the knee and
    its two noise-floor runs), would agree within 3%."""
    threes = list(itertools.combinations(values, 3))
    return sum(spread(list(three)) <= within for three in threes) / len(threes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0, help="per process")
    add_config_arguments(parser)
    parser.add_argument("--reference-batch", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--env", help="KEY=VALUE in every other process's environment")
    parser.add_argument("--without-onednn", action="store_true",
                        help="torch's own kernels, not oneDNN's (which it compiles per shape, "
                        "as the process runs)")  # fmt: skip
    parser.add_argument("--without-aslr", action="store_true",
                        help="every other process without address randomisation "
                        "(setarch -R)")  # fmt: skip
    parser.add_argument("--windows", type=int, default=1, help="timed in each process")
    parser.add_argument("--move-weights", action="store_true",
                        help="the config's weights moved in memory between windows")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args)), flush=True)
        return 0
    if args.env and args.without_aslr:
        parser.error("--env and --without-aslr each take every other process: give one")
    if args.move_weights and args.windows < 2:
        parser.error("--move-weights moves them between windows: give --windows 2 or more")
    if args.without_aslr and shutil.which("setarch") is None:
        parser.error("--without-aslr needs setarch (util-linux), not found on PATH")
    changed: dict[str, str] = {}
    if args.env:
        key, equals, value = args.env.partition("=")
        if not equals or not key:
            parser.error(f"--env takes KEY=VALUE, not {args.env!r}")
        changed = {key: value}
    child = [sys.executable, __file__, "--child", "--seconds", str(args.seconds),
             "--batch-size", str(args.batch_size), "--reference-batch",
             *map(str, args.reference_batch)]  # fmt: skip
    child += ["--amp"] * args.amp + ["--channels-last"] * args.channels_last
    child += ["--without-onednn"] * args.without_onednn
    child += ["--windows", str(args.windows)] + ["--move-weights"] * args.move_weights
    sets: dict[str, list[dict[str, float]]] = {}
    by_window: list[list[dict[str, float]]] = []  # per process, each window's reading
    for number in range(args.processes):
        with_env = bool(changed) and number % 2 == 1
        without_aslr = args.without_aslr and number % 2 == 1
        env = {**os.environ, **WORKER_ENV, **(changed if with_env else {})}
        command = ["setarch", platform.machine(), "-R", *child] if without_aslr else child
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        if measured["onednn"] != float(not args.without_onednn):
            raise SystemExit(f"process {number + 1}: oneDNN was not as asked")
        if measured["aslr"] and without_aslr:
            raise SystemExit(f"process {number + 1}: its addresses were randomised all the same")
        by_window.append([ratios(speeds) for speeds in measured["windows"]])
        read = by_window[-1][0]
        label = args.env if with_env else "without ASLR" if without_aslr else "as it is"
        sets.setdefault(label, []).append(read)
        where = f" ({label})" if with_env or without_aslr else ""
        where += " (torch's kernels, oneDNN off)" if args.without_onednn else ""
        print(f"process {number + 1}{where}: config {read['config']:.0f} images/s, " + ", ".join(
            f"{name} {value:.3f}" for name, value in read.items() if name != "config"),
            flush=True)  # fmt: skip
        if args.windows > 1:
            print(f"process {number + 1}, its windows{' (weights moved)' * args.move_weights}: "
                  + "; ".join(", ".join(f"{name} {value:.3f}" for name, value in reads.items()
                                        if name != "config") for reads in by_window[-1]),
                  flush=True)  # fmt: skip
    every = [read for reads in sets.values() for read in reads]
    for name in every[0]:
        values = [r[name] for r in every]
        print(f"{name}: largest / smallest process {spread(values):.3f}")
    if len(every) >= 3:
        for name in every[0]:
            values = [r[name] for r in every]
            print(f"{name}: sd of the logarithm {log_sd(values):.1%}, threes of processes "
                  f"within 3% {threes_within(values):.2f}")  # fmt: skip
    if args.windows > 1 and len(by_window) >= 2:
        for name in every[0]:
            print(f"{name}: {window_spreads(by_window, name)}")
    if len(sets) > 1:
        for label, reads in sets.items():
            print(f"{label}: " + ", ".join(
                f"{name} median {statistics.median(r[name] for r in reads):.3f}, spread "
                f"{spread([r[name] for r in reads]):.3f}" for name in reads[0]))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
