"""`python -m search.capacity --config FILE`: the largest batch each technique fits.

Like the seed article's tables 1-4: for the config's model and image size, under the
trial's memory budget, the largest physical batch for the baseline, with the cuDNN
autotuner off, with AMP, with gradient checkpointing and with both, then the effective
batch that accumulation reaches on top; with the step time and peak memory at that batch.

The largest batch is found by doubling, then bisection, over a "does a step of b images
fit" probe. On a GPU the probe runs real training steps (an out-of-memory error means no).
On CPU it asks the memory meter, whose parts are affine in the batch (the parameters,
gradients and optimizer state are fixed; the saved activations grow with each image), so
it is measured at two small batches and solved exactly (`trainables.memory.MeteredStep`)
instead of allocating batches the host could not hold.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from search.config import ConfigError, SearchConfig, load_config
from search.errors import Problem
from trainables.classifier import set_determinism, start_trial
from trainables.memory import MIB, MemoryBudget, MeteredStep, metered_step, step_peak_bytes
from trainables.oom import release_memory
from trainables.settings import TrainSettings
from trainables.step import train_step
from trainables.techniques import capacity_rows

EXIT_USAGE = 2
NUM_CLASSES = 2  # cats and dogs; the memory of the head hardly depends on it
MAX_BATCH = 1 << 16  # stop doubling here: "fits anything we would try"

# (row name, settings), from the technique table; the seed's baseline ran the autotuner.
ROWS: list[tuple[str, dict[str, object]]] = capacity_rows()


def largest_fitting(fits: Callable[[int], bool], limit: int = MAX_BATCH) -> int:
    """The largest b in [1, limit] with fits(b), assuming fits is monotone; 0 if none.

    Doubling from 1 brackets it, bisection closes the bracket: about 2 log2(b) probes.
    """
    if not fits(1):
        return 0
    low = 1  # fits
    while low < limit and fits(min(2 * low, limit)):
        low = min(2 * low, limit)
    if low == limit:
        return limit
    high = min(2 * low, limit)  # does not fit
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class CapacityRow:
    technique: str
    max_batch_size: int  # physical
    accumulation_steps: int
    effective_batch_size: int
    step_time_s: float  # one optimizer step at the largest batch
    peak_mem_mb: float  # at the largest batch
    timed_batch_size: int  # the batch the step time was measured at (see --host-limit-mb)


class Prober:
    """Builds the trial of one row and answers "does a step of b images fit".

    The trial is started as a search starts it: on a GPU held to the row's budget (the
    trial's share of the card), its steps are `train_step`, and what fits is decided by the
    trial's `MemoryBudget`.
    """

    def __init__(self, settings: TrainSettings, image_size: int, budget_mb: float) -> None:
        self.image_size = image_size
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        # On CUDA the budget is the share of the card; on CPU what the meter is held to.
        set_determinism(settings)
        budget = MemoryBudget(self.device, budget_mb)
        self.trial = start_trial(settings, NUM_CLASSES, image_size, budget, None)
        self._metered: MeteredStep | None = None
        if self.device.type == "cuda":
            self.time_steps(1, 0)  # the first step allocates the optimizer's state

    def batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = torch.randn(size, 3, self.image_size, self.image_size, device=self.device)
        return inputs, torch.randint(0, 2, (size,), device=self.device)

    def peak_bytes(self, size: int) -> float:
        """The CPU meter's peak for a step of `size` images, from two tiny batches."""
        trial = self.trial
        if self._metered is None:
            self._metered = metered_step(
                trial.model, trial.optimizer, *self.batch(4), trial.precision
            )
        return self._metered.peak_bytes(size)

    def fits(self, size: int) -> bool:
        trial = self.trial
        if self.device.type != "cuda":
            return trial.budget.allows(self.peak_bytes(size))
        return trial.budget.fits(
            trial.model, trial.optimizer, lambda: self.batch(size), trial.precision
        )

    def time_steps(self, size: int, steps: int) -> tuple[float, float]:
        """(median seconds per training step, peak MiB) at `size` images."""
        trial = self.trial
        inputs, targets = self.batch(size)
        trial.budget.reset_peak()
        trial.model.train()
        durations = []
        for _ in range(steps + 1):  # the first step warms up kernels and optimizer state
            started = time.perf_counter()
            train_step(trial.model, trial.optimizer, [(inputs, targets)], trial.precision,
                       images=size)  # fmt: skip
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            durations.append(time.perf_counter() - started)
        metered = 0
        if self.device.type != "cuda":
            metered = step_peak_bytes(
                trial.model, trial.optimizer, inputs, targets, trial.precision
            )
        return statistics.median(durations[1:] or durations), trial.budget.peak_bytes(metered) / MIB


def measure_row(
    name: str, settings: TrainSettings, image_size: int, budget_mb: float, steps: int,
    host_limit_mb: float,
) -> CapacityRow:  # fmt: skip
    prober = Prober(settings, image_size, budget_mb)
    largest = largest_fitting(prober.fits)
    if largest == 0:
        return CapacityRow(name, 0, 1, 0, math.nan, math.nan, 0)
    timed = largest
    if prober.device.type == "cpu":  # time what the host can hold; scale per image
        host_limit = host_limit_mb * MIB
        timed = max(1, min(largest, largest_fitting(lambda b: prober.peak_bytes(b) <= host_limit)))
    seconds, measured_mb = prober.time_steps(timed, steps)
    peak_mb = prober.peak_bytes(largest) / MIB if prober.device.type == "cpu" else measured_mb
    return CapacityRow(name, largest, 1, largest, seconds * largest / timed, peak_mb, timed)


def give_back_freed_memory() -> None:
    """Return freed heap to the system between rows: glibc keeps it otherwise, and the
    next technique's model and batches would pile up on top (Linux; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def capacity_table(
    config: SearchConfig,
    budget_mb: float,
    accumulation_steps: int,
    steps: int,
    host_limit_mb: float,
    say: Callable[[str], None] = print,
) -> list[CapacityRow]:
    base = TrainSettings.from_config(config.train_config())
    rows = []
    for name, switches in ROWS:
        settings = base.model_copy(update={**switches, "accumulation_steps": 1})
        row = measure_row(name, settings, config.data.image_size, budget_mb, steps, host_limit_mb)
        say(f"  {name}: largest batch {row.max_batch_size}")
        rows.append(row)
        release_memory(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
        give_back_freed_memory()
    best = max(rows, key=lambda row: row.max_batch_size)
    rows.append(
        CapacityRow(
            technique=f"{best.technique} + accumulation x{accumulation_steps}",
            max_batch_size=best.max_batch_size,
            accumulation_steps=accumulation_steps,
            effective_batch_size=best.max_batch_size * accumulation_steps,
            step_time_s=best.step_time_s * accumulation_steps,
            peak_mem_mb=best.peak_mem_mb,
            timed_batch_size=best.timed_batch_size,
        )
    )
    return rows


COLUMNS = (
    ("technique", "40s"),
    ("max_batch_size", "6d"),
    ("accumulation_steps", "6d"),
    ("effective_batch_size", "9d"),
    ("step_time_s", "8.3f"),
    ("peak_mem_mb", "9.1f"),
)
HEADINGS = ("technique", "batch", "accum", "effective", "step s", "peak MiB")


def render(rows: list[CapacityRow]) -> str:
    """The table; a step time scaled from a smaller timed batch is marked ~."""
    widths = [int(spec.rstrip("sdf").split(".")[0]) for _, spec in COLUMNS]
    header = " ".join(
        f"{title:{width}s}" if i == 0 else f"{title:>{width}s}"
        for i, (title, width) in enumerate(zip(HEADINGS, widths, strict=True))
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        values = asdict(row)
        cells = [format(values[name], spec) for name, spec in COLUMNS]
        if row.timed_batch_size != row.max_batch_size:
            cells[4] = "~" + cells[4].lstrip()
            cells[4] = f"{cells[4]:>8s}"
        lines.append(" ".join(cells))
    return "\n".join(lines)


def write_csv(rows: list[CapacityRow], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)


def budget_of(config: SearchConfig) -> float:
    """The trial's memory budget in MiB: the configured one, or its share of the GPU."""
    if config.resources.memory_budget_mb is not None:
        return config.resources.memory_budget_mb
    if torch.cuda.is_available():
        total = torch.cuda.get_device_properties(0).total_memory / MIB
        share = config.resources.gpu if 0 < config.resources.gpu < 1 else 1.0
        return total * share
    raise ConfigError(
        config.source,
        [
            Problem(
                "resources.memory_budget_mb",
                "is needed on a machine without a GPU: the capacity is measured against it "
                "(e.g. resources.memory_budget_mb=11000 for an 11 GB card)",
            )
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m search.capacity", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--config", required=True, help="a search config; its model, image "
                        "size, device and per-trial memory budget are used")  # fmt: skip
    parser.add_argument("--out", help="CSV path (default: <storage_path>/<name>-capacity.csv)")
    parser.add_argument(
        "--accumulation-steps", type=int, default=2, help="for the last row (default: 2)"
    )
    parser.add_argument(
        "--steps", type=int, default=3, help="timed steps per technique (default: 3)"
    )
    parser.add_argument(
        "--host-limit-mb",
        type=float,
        default=1024,
        help="CPU: time steps at the largest batch whose metered step fits in this much, and "
        "scale the time to the full batch (marked ~); the host needs several times the meter's "
        "figure (operator workspaces, allocator caches)",
    )
    parser.add_argument("overrides", nargs="*", metavar="key.path=value",
                        help="override config keys, as in search.run")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        budget = budget_of(config)
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return EXIT_USAGE
    torch.set_num_threads(max(1, min(int(config.resources.cpu), os.cpu_count() or 1)))
    device = "GPU" if torch.cuda.is_available() else "CPU (memory meter)"
    print(
        f"Capacity of {config.train.get('model', 'small_cnn')} at {config.data.image_size} px "
        f"under {budget:.0f} MiB per trial, {device}:"
    )
    rows = capacity_table(config, budget, args.accumulation_steps, args.steps, args.host_limit_mb)
    out = (
        Path(args.out)
        if args.out
        else Path(config.run.storage_path) / f"{config.name}-capacity.csv"
    )
    write_csv(rows, out)
    print()
    print(render(rows))
    print(f"\nWritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
