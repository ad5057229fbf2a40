"""`python -m search.capacity --config FILE`: the largest batch each technique fits.

Like the seed article's tables 1-4: for the config's model and image size, under the
trial's memory budget, the largest physical batch for the baseline, with each technique
that costs memory off, with each that saves memory on, and with all of those together
(`trainables.techniques.capacity_rows`), then the effective batch that accumulation reaches
on top; with the step time and peak memory at that batch.

Each row predicts its largest batch from two probes (a step's peak is a line in the batch:
`trainables.memory.StepLine`), then verifies it with a few more around the prediction,
galloping outwards where it was off and bisecting back to the exact largest batch: a
handful of probes where doubling and bisection took about 2 log2(b). On a GPU a probe is a
real training step (an out-of-memory error means no) and its peak is the allocator's
reserved memory; the cuDNN autotuner, which tunes every new batch shape again, runs only
in the row that measures it (`trainables.techniques.capacity_rows`: the baseline; the
memory-saving techniques' rows run with it off), and there only to verify the batch the
search found without it. On CPU the probe is the memory meter,
whose parts are affine in the batch, measured on two tiny batches and solved exactly
(`trainables.memory.MeteredStep`), so batches the host could not hold are never allocated;
the AMP rows' steps are timed there only where the CPU has fast bfloat16
(`amp_steps_timed`). A line per probe is printed as it goes.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from analysis.arguments import COUNT, POSITIVE
from search.cli import say
from search.config import ConfigError, SearchConfig, load_config, renamed_notes
from search.devices import slow_cpu_amp
from search.errors import Problem
from search.experiment import nearest_existing
from trainables.cuda import TorchCudaCard, available, resolve_device, synchronize
from trainables.host_memory import give_back_freed_memory, hold_host_allocator
from trainables.memory import (
    CARD_PROBE_BATCHES,
    MAX_BATCH,
    MIB,
    MemoryBudget,
    MeteredStep,
    StepLine,
    StepPeak,
    metered_step,
    step_peak_bytes,
)
from trainables.oom import is_out_of_memory, release_memory
from trainables.settings import TrainSettings
from trainables.step import train_step
from trainables.techniques import IDLE_ON_CPU, capacity_rows, idle_settings
from trainables.trial import choose_kernels, layout_of, start_trial

EXIT_USAGE = 2
NUM_CLASSES = 2  # cats and dogs; the memory of the head hardly depends on it


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
    return _bisect(fits, low, min(2 * low, limit))


def largest_near(fits: Callable[[int], bool], guess: int, limit: int = MAX_BATCH) -> int:
    """The largest b in [1, limit] with fits(b) (monotone), searched from `guess`: a step
    of about 3% of it brackets the answer (the step doubles while the guess is off), then
    bisection closes the bracket. A good guess costs 2 + log2(guess / 32) probes."""
    guess = max(1, min(guess, limit))
    step = max(1, guess // 32)
    if fits(guess):
        low = guess
        while low < limit and fits(min(low + step, limit)):
            low, step = min(low + step, limit), step * 2
        return limit if low == limit else _bisect(fits, low, min(low + step, limit))
    high = guess
    while high > 1 and not fits(max(high - step, 1)):
        high, step = max(high - step, 1), step * 2
    return 0 if high == 1 else _bisect(fits, max(high - step, 1), high)


def _bisect(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest b in [low, high) with fits(b), where low fits and high does not."""
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
    # None in a row derived from another (accumulation's), which nothing probed: "-" in the
    # table, empty in the CSV
    predicted_batch_size: int | None = None  # from the two probes' line, before it was verified
    probes: int | None = None  # steps (or meter readings) that decided the largest batch
    seconds: float | None = None  # the row's wall time, its trial's start and timed steps included


class Prober:
    """Builds the trial of one row and answers "what does a step of b images peak at".

    The trial is started as a search starts it: on a GPU held to the row's budget (the
    trial's share of the card), its steps are `train_step`, and what fits is decided by the
    trial's `MemoryBudget`. `card`: the card to hold it to (default: the device's own).
    """

    def __init__(
        self,
        settings: TrainSettings,
        image_size: int,
        budget_mb: float | None,
        card: TorchCudaCard | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.image_size = image_size
        self.device = resolve_device(settings.device)
        self.say = say
        self.probes = 0
        # On CUDA the budget is the share of the card; on CPU what the meter is held to.
        choose_kernels(settings)
        budget = MemoryBudget(self.device, budget_mb, card=card)
        self.trial = start_trial(settings, NUM_CLASSES, image_size, budget, None)
        self._metered: MeteredStep | None = None
        if self.on_card:
            self.time_steps(1, 0)  # the first step allocates the optimizer's state

    @property
    def on_card(self) -> bool:
        return self.trial.budget.card is not None

    def batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Random images in the row's layout, as its trials would feed them."""
        inputs = torch.randn(size, 3, self.image_size, self.image_size, device=self.device)
        return inputs.contiguous(memory_format=layout_of(self.trial.settings)), torch.randint(
            0, 2, (size,), device=self.device
        )

    def peak_bytes(self, size: int) -> float:
        """The CPU meter's peak for a step of `size` images, from two tiny batches."""
        trial = self.trial
        if self._metered is None:
            self._metered = metered_step(
                trial.model, trial.optimizer, *self.batch(4), trial.precision
            )
        return self._metered.peak_bytes(size)

    def peak(self, size: int, fresh: bool = False) -> StepPeak | None:
        """A step of `size` images: its peak, or None where it does not fit the budget.
        `fresh`: from an empty allocator cache, as a trial's first step (see
        `MemoryBudget.step_peak`)."""
        trial = self.trial
        self.probes += 1
        started = time.perf_counter()
        steps = self.on_card or self._metered is None  # the meter steps once, then predicts
        if self.on_card:
            peak = trial.budget.step_peak(
                trial.model, trial.optimizer, lambda: self.batch(size), trial.precision,
                fresh=fresh,
            )  # fmt: skip
        else:
            metered = int(self.peak_bytes(size))
            peak = StepPeak(metered, metered) if trial.budget.allows(metered) else None
        if self.say is not None:
            seconds = time.perf_counter() - started
            verdict = "does not fit" if peak is None else (
                f"fits, {peak.reserved_bytes / MIB:.0f} MiB reserved"
            )  # fmt: skip
            how = f"{seconds:.2f} s" if steps else "from the meter's two steps"
            self.say(f"    batch {size}: {verdict} ({how})")
        return peak

    def fits(self, size: int) -> bool:
        return self.peak(size) is not None

    def predicted_largest(self) -> int:
        """The largest batch the two probe batches' line allows under the budget's limit;
        where the larger probe does not fit, the smaller (1 if neither does): the search
        goes up from there."""
        small, large = CARD_PROBE_BATCHES
        at_small, at_large = self.peak(small, fresh=True), self.peak(large, fresh=True)
        if at_small is None or at_large is None:
            return small if at_small is not None else 1
        line = StepLine(small, large, at_small.reserved_bytes, at_large.reserved_bytes)
        limit = self.trial.budget.limit_bytes
        return MAX_BATCH if limit is None else line.largest_within(limit)

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
            synchronize(self.device)
            durations.append(time.perf_counter() - started)
        metered = 0
        if not self.on_card:
            metered = step_peak_bytes(
                trial.model, trial.optimizer, inputs, targets, trial.precision
            )
        peak = trial.budget.peak(metered).allocated_bytes
        return statistics.median(durations[1:] or durations), peak / MIB


def confirmed_near(fits: Callable[[int], bool], guess: int) -> int:
    """`guess` where it fits and one more does not (two probes); else the search from it."""
    if fits(guess) and not fits(guess + 1):
        return guess
    return largest_near(fits, guess)


@contextlib.contextmanager
def autotuner_off() -> Iterator[None]:
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = True


def measure_row(
    name: str, settings: TrainSettings, image_size: int, budget_mb: float, steps: int,
    host_limit_mb: float, card: TorchCudaCard | None = None,
    say: Callable[[str], None] | None = None, timed_here: bool = True,
) -> CapacityRow:  # fmt: skip
    """The row's largest batch, and its step time there; `timed_here`: False leaves a CPU
    row's step time unmeasured (NaN, `timed_batch_size` 0), a card's is always measured."""
    started = time.perf_counter()
    prober = Prober(settings, image_size, budget_mb, card=card, say=say)
    if prober.on_card and torch.backends.cudnn.benchmark:
        # The autotuner tunes every new batch shape again (7 s a probe for ResNet-50 on an
        # H100): the search runs without it, then its answer is verified with it on, which
        # takes a probe either side where the autotuner's kernels need no more memory.
        with autotuner_off():
            predicted = prober.predicted_largest()
            untuned = largest_near(prober.fits, predicted)
        largest = confirmed_near(prober.fits, max(untuned, 1))
    else:
        predicted = prober.predicted_largest()
        largest = largest_near(prober.fits, predicted)
    probes = prober.probes
    if largest == 0:
        seconds = time.perf_counter() - started
        return CapacityRow(name, 0, 1, 0, math.nan, math.nan, 0, predicted, probes, seconds)
    timed = largest
    if not prober.on_card:  # time what the host can hold; scale per image
        host_limit = host_limit_mb * MIB
        timed = max(1, min(largest, largest_fitting(lambda b: prober.peak_bytes(b) <= host_limit)))
    if prober.on_card:
        trained = timed_where_it_trains(prober, largest, steps, say)
        if trained is None:  # the row says so; the table goes on to the next technique
            seconds = time.perf_counter() - started
            return CapacityRow(name, 0, 1, 0, math.nan, math.nan, 0, predicted, prober.probes,
                               seconds)  # fmt: skip
        largest, step_seconds, measured_mb = trained
        timed = largest
    elif timed_here:
        step_seconds, measured_mb = prober.time_steps(timed, steps)
    else:
        step_seconds, timed = math.nan, 0
    peak_mb = measured_mb if prober.on_card else prober.peak_bytes(largest) / MIB
    seconds = time.perf_counter() - started
    step_time_s = step_seconds * largest / timed if timed else math.nan
    return CapacityRow(name, largest, 1, largest, step_time_s, peak_mb, timed, predicted,
                       probes, seconds)  # fmt: skip


# A probe that fits at the very edge of the budget can leave no room for the timed steps
# after it (the allocator's cache, cut to the probes' sizes, fragments): the batch then steps
# down, first by this share, each step down twice the one before, at most this many times,
# until several steps train. Twice: on an H200 (2026-11-27) activation checkpointing's probe
# held 291 under an 11 GB share and no batch down to 263 (steps of 2%) trained three steps;
# five doubling steps reach half the probe's answer.
STEP_DOWN_SHARE = 0.02
STEP_DOWNS = 5


def timed_where_it_trains(
    prober: Prober, largest: int, steps: int, say: Callable[[str], None] | None = None
) -> tuple[int, float, float] | None:
    """(the batch, median seconds per step, peak MiB) of `steps` training steps on the card
    from an empty cache, as a trial trains: at `largest`, or where those steps run out of
    memory, at the largest batch below it that trains (the row's answer is what trains,
    not what one probe held); None where none of the batches tried trains."""
    shares = [STEP_DOWN_SHARE * 2**n for n in range(STEP_DOWNS)]
    for share in [*shares, None]:  # None: the last batch tried
        # from an empty cache; after a failed try, out of its except block: its frames are gone
        release_memory(prober.device)
        try:
            return largest, *prober.time_steps(largest, steps)
        except Exception as error:  # only the card's out-of-memory error steps down
            if not is_out_of_memory(error, prober.trial.budget.allocator_refused):
                raise
            held = memory_when_refused(prober)  # numbers only leave this block
        prober.probes += 1
        lower = 0 if share is None else largest - max(1, round(largest * share))
        if lower < 1:
            break
        if say is not None:
            say(f"    batch {largest}: its timed steps ran out of memory ({held}); {lower} next")
        largest = lower
    if say is not None:
        say(f"    batch {largest}: its timed steps ran out of memory ({held}); no batch down "
            f"to it trained {steps} steps, the row has none")  # fmt: skip
    return None


def memory_when_refused(prober: Prober) -> str:
    """What the allocator held when the timed steps ran out: their tensors' peak against
    what it had reserved and its limit. A peak well under the reserved memory means the
    cache was cut into blocks the next tensor did not fit (fragmentation), not a batch too
    large for the share (the H200's checkpointing row, 2026-11-27, asks which)."""
    card, limit = prober.trial.budget.card, prober.trial.budget.limit_bytes
    if card is None:
        return "the meter's budget"
    of = "" if limit is None else f" of {limit / MIB:.0f}"
    return (
        f"tensors peaked at {card.peak_bytes() / MIB:.0f} MiB, "
        f"{card.reserved_bytes() / MIB:.0f}{of} MiB reserved"
    )


def capacity_table(
    config: SearchConfig,
    budget_mb: float,
    accumulation_steps: int,
    steps: int,
    host_limit_mb: float,
    say: Callable[[str], None] = say,
    card: TorchCudaCard | None = None,
    base: TrainSettings | None = None,
    time_amp: bool = True,
) -> list[CapacityRow]:
    """A row per technique of `capacity_rows`; `base`: the config's train settings on this
    machine (`machine_settings`), when the caller has them already; `time_amp`: False
    leaves the AMP rows' step times unmeasured on a CPU (`amp_steps_timed`)."""
    base = base or machine_settings(config)
    rows = []
    for name, switches in capacity_rows():  # the technique table's; the seed's baseline
        # ran the cuDNN autotuner
        settings = base.model_copy(update={**switches, "accumulation_steps": 1})
        say(f"  {name}:")
        row = measure_row(name, settings, config.data.image_size, budget_mb, steps,
                          host_limit_mb, card=card, say=say,
                          timed_here=time_amp or not settings.amp)  # fmt: skip
        say(
            f"  {name}: largest batch {row.max_batch_size} (predicted "
            f"{row.predicted_batch_size}; {row.probes} probes, {row.seconds:.1f} s)"
        )
        rows.append(row)
        release_memory(resolve_device(base.device))
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
    ("probes", "6d"),
)
HEADINGS = ("technique", "batch", "accum", "effective", "step s", "peak MiB", "probes")


def render(rows: list[CapacityRow]) -> str:
    """The table; a step time scaled from a smaller timed batch is marked ~, and said so
    under it."""
    widths = [int(spec.rstrip("sdf").split(".")[0]) for _, spec in COLUMNS]
    widths[0] = max(widths[0], *(len(row.technique) for row in rows))
    header = " ".join(
        f"{title:{width}s}" if i == 0 else f"{title:>{width}s}"
        for i, (title, width) in enumerate(zip(HEADINGS, widths, strict=True))
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        values = asdict(row)
        cells = [
            f"{'-':>{width}s}" if values[name] is None else format(values[name], spec)
            for (name, spec), width in zip(COLUMNS, widths, strict=True)
        ]
        cells[0] = f"{row.technique:{widths[0]}s}"
        if math.isnan(row.step_time_s):
            cells[4] = f"{'untimed':>8s}"
        elif row.timed_batch_size != row.max_batch_size:
            cells[4] = "~" + cells[4].lstrip()
            cells[4] = f"{cells[4]:>8s}"
        lines.append(" ".join(cells))
    if any(row.timed_batch_size != row.max_batch_size for row in rows):
        lines.append("~: timed at a smaller batch that fits --host-limit-mb, scaled to the batch")
    return "\n".join(lines)


def write_csv(rows: list[CapacityRow], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)


def amp_steps_timed(config: SearchConfig, card: TorchCudaCard | None, threads: int) -> bool:
    """Whether the AMP rows' steps are timed: on a card always; on a CPU where a probe
    (`trainables.amp_probe`, of the small CNN: fast bfloat16 is the CPU's, not the model's)
    finds bf16 autocast fast enough (`search.devices.slow_cpu_amp`, the search's rule), or where
    `search.amp_probe` is off. A CPU that emulates bf16 took minutes a row to time steps
    whose speed tells nothing of a card's (ResNet-50: about 20 minutes for the table, on
    AVX2 only); their largest batches are the meter's either way."""
    if card is not None or not config.search.amp_probe:
        return True
    slow = slow_cpu_amp("small_cnn", 32, threads)
    if slow is None:
        return True
    print(f"AMP's step times are left untimed: {slow}; search.amp_probe=false times them anyway")
    return False


def on_this_machine(settings: TrainSettings) -> TrainSettings:
    """The settings on a device this machine has: a GPU study's table runs anywhere, with
    the CPU meter where torch sees no GPU."""
    if settings.device != "cpu" and not available():
        return settings.model_copy(update={"device": "cpu"})
    return settings


def machine_settings(config: SearchConfig) -> TrainSettings:
    """The config's train settings as this machine runs them (`on_this_machine`)."""
    return on_this_machine(TrainSettings.from_config(config.train_config()))


def budget_of(config: SearchConfig, card: TorchCudaCard | None) -> float:
    """The trial's memory budget in MiB: the configured one, or its share of `card` (None:
    no GPU here)."""
    if config.resources.memory_budget_mb is not None:
        return config.resources.memory_budget_mb
    if card is not None:
        total = card.total_bytes() / MIB
        asked = config.resources.with_cards(1).gpu_share  # a card is here: auto's share
        share = asked if 0 < asked < 1 else 1.0
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


def out_problem(out: Path) -> str | None:
    """Why the table cannot be written at `out`, or None."""
    if out.is_dir():
        return "is a folder; give the CSV file's path"
    existing = nearest_existing(out.parent)
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m search.capacity", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--config", required=True, help="a search config; its model, image "
                        "size, device and per-trial memory budget are used")  # fmt: skip
    parser.add_argument("--out", help="CSV path (default: <storage_path>/<name>-capacity.csv)")
    parser.add_argument(
        "--accumulation-steps",
        type=COUNT,
        default=2,
        help="for the last row (default: 2)",
    )
    parser.add_argument(
        "--steps", type=COUNT, default=3, help="timed steps per technique (default: 3)"
    )
    parser.add_argument(
        "--host-limit-mb",
        type=POSITIVE,
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
        for note in renamed_notes(config):
            print(note, file=sys.stderr)
        settings = machine_settings(config)
        card = None if settings.device == "cpu" else TorchCudaCard(resolve_device(settings.device))
        budget = budget_of(config, card)
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return EXIT_USAGE
    out = (
        Path(args.out)
        if args.out
        else Path(config.run.storage_path) / f"{config.name}-capacity.csv"
    )
    problem = out_problem(out)
    if problem is not None:  # said now, not after minutes of measuring
        print(f"error: --out {out}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    threads = max(1, min(int(config.resources.cpu), os.cpu_count() or 1))
    torch.set_num_threads(threads)
    hold_host_allocator()  # its timed steps run as a trial's do (trainables.host_memory)
    device = "CPU (memory meter)" if card is None else card.describe()["device_name"]
    print(
        f"Capacity of {config.train.get('model', 'small_cnn')} at {config.data.image_size} px "
        f"under {budget:.0f} MiB per trial, {device}:"
    )
    time_amp = amp_steps_timed(config, card, threads)
    rows = capacity_table(config, budget, args.accumulation_steps, args.steps,
                          args.host_limit_mb, card=card, base=settings,
                          time_amp=time_amp)  # fmt: skip
    write_csv(rows, out)
    print()
    print(render(rows))
    note = idle_rows_note() if card is None else None
    if note:
        print(note)
    print(f"\nWritten to {out}")
    return 0


def idle_rows_note() -> str | None:
    """On a CPU: the rows whose switch does nothing there train as the baseline does, so
    their step times differ from its by the timing's noise (the autotuner's row read 24%
    slower once, 2026-12-07), not by a cost."""
    idle = set(idle_settings(on_gpu=False))
    (_, baseline), *others = capacity_rows()
    names = [
        name
        for name, switches in others
        if {key for key in switches if switches[key] != baseline.get(key)} <= idle
    ]
    if not names:
        return None
    return (
        f"{', '.join(names)}: {IDLE_ON_CPU}; its row trains as the baseline does, and their "
        "step times differ by the timing's noise"
    )


if __name__ == "__main__":
    from search.cli import run_as_command

    run_as_command(main)
