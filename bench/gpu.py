"""The CUDA path measured on one GPU, side by side in one run: a table and a CSV.

1. loop: the trainable against a bare CUDA loop (same model, data, batch and precision;
   ResNet-50 at 224 px, batch 128; fp32 (TF32), fp16 AMP) and against the tuned loop
   (channels_last + AMP, and + torch.compile): images/s of the training part (goal with
   channels_last + AMP: 0.9x the tuned loop or more) and of the whole run (the trial's
   start, evaluation and saved states included; goal at --epochs 4: 0.75x the loop's whole
   run or more), and NVIDIA's published ResNet-50 figures for reference.
2. memory: the memory model against the card: for ResNet-50 at 224 px, AMP x
   checkpointing, the reserved peak of a full-size step predicted from the two probe
   batches' line (`trainables.memory.StepLine`) against the one measured at batches 16 to
   512, each from an empty cache as a trial starts: the mean absolute percentage error
   (goal: 5% or less), over all batches and over those the line was not fitted to.
3. capacity: `python -m search.capacity` for configs/deelvin_resnet50.yaml on the card,
   each technique's largest batch under an 11 GB share, and the table's wall time (goal:
   60 s or less on an H100-class card).
4. packing: four 0.25-GPU trials of the tuned loop's config (batch 128, channels_last +
   AMP) together against the tuned loop: every image trained over the wall time from the
   first start to the last end (goal: 0.9 or more), and the card's peak memory use.
4b. by_memory: the same shrunk configs/cats_dogs_gpu.yaml search (12 suggestions, 2
   epochs, one CPU a trial, as many at once as the card's shares allow) with a fixed quarter
   per trial and packed by predicted memory (`resources.pack: memory`): trials trained per
   hour of wall time, the most trials at once (whether packing acted) and trials ended out
   of memory (goal: more trials per hour, no more OOMs).
5. oom: a trial whose first step is over its share, from start to pruned report, in
   training steps of the same model (goal: 1 or less); and a shrunk
   configs/cats_dogs_gpu.yaml search with a budget the larger batches exceed: trials ended
   ok / oom / oom_predicted / ERROR (goal: no ERROR).

Each part runs in a process of its own, under its own time limit (`PART_SECONDS` in
bench/on_device.py, or `--part-timeout` for all), ended with everything it started.
Without a GPU the loop and memory parts run a small stand-in (the small CNN at 32 px; its
memory is the CPU meter's) so that every code path is exercised, and each GPU-only figure is
printed as not measured, with why. `bench/on_device.py` runs this and the test suite on the
GPU machine in one call.

    python bench/gpu.py [--parts loop memory capacity packing by_memory oom] [--out gpu.csv]
                        [--epochs 2] [--part-timeout SECONDS]
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from on_device import PART_SECONDS, run_limited  # bench/, first on a script's path

from analysis.load import PREDICTED_PEAK_COLUMN
from trainables.classifier import fit_classifier
from trainables.cuda import MIB, available, resolve_device, synchronize
from trainables.data import DataSettings, PreparedData, prepare_data
from trainables.memory import CARD_PROBE_BATCHES, StepLine
from trainables.metrics import STATUS_OOM, STATUS_ORDER
from trainables.models import build_model
from trainables.settings import TrainSettings
from trainables.trial import build_optimizer

REPO = Path(__file__).resolve().parents[1]
PARTS = ("loop", "memory", "capacity", "packing", "by_memory", "oom", "card")
# without one: "not here" rows
GPU_ONLY = frozenset({"capacity", "packing", "by_memory", "oom", "card"})
# NVIDIA DeepLearningExamples, ResNet-50 v1.5 training on one A100 80GB, batch 256.
NVIDIA_A100_IMAGES_PER_S = {"TF32": 938, "AMP": 2470}


@dataclass(frozen=True)
class Row:
    part: str
    measurement: str
    value: float | None  # None: not measured here
    unit: str
    note: str = ""


@dataclass(frozen=True)
class Case:
    """What the loop part trains: the GPU case, or the CPU stand-in."""

    model: str
    image_size: int
    batch_size: int
    train_per_class: int


GPU_CASE = Case("resnet50", 224, 128, 640)
CPU_CASE = Case("small_cnn", 32, 32, 128)


def on_gpu() -> bool:
    return available()


def device_name() -> str:
    """The card's name from nvidia-smi: asking torch would open a CUDA context in this
    process, memory the parts' own processes would then not have."""
    if not on_gpu():
        return "CPU (no GPU: a stand-in run)"
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 else "a CUDA GPU"


def here() -> torch.device:
    return resolve_device("auto")


# --- 1. the trainable against a bare loop ----------------------------------------------------


@dataclass(frozen=True)
class Rates:
    """Images/s of a run: its last epoch's training, and the whole run per epoch (its start,
    and for the trainable its evaluation and saved states, included)."""

    last_epoch: float
    whole_run: float


def bare_loop(
    settings: TrainSettings, data: PreparedData, tuned: bool = False, compiled: bool = False
) -> Rates:
    """The loop anyone would write: normalised float images on the device, shuffle, step;
    `tuned` adds channels_last (with AMP as the settings say), `compiled` torch.compile."""
    started = time.perf_counter()
    device = here()
    torch.manual_seed(settings.seed)
    model = build_model(settings.model, data.num_classes, data.image_size).to(device)
    layout = torch.channels_last if tuned else torch.contiguous_format
    model = model.to(memory_format=layout)
    optimizer = build_optimizer(settings, model.parameters(), fused=device.type == "cuda")
    step_model = torch.compile(model) if compiled else model
    mean = torch.tensor(data.mean, device=device).view(1, 3, 1, 1)
    std = torch.tensor(data.std, device=device).view(1, 3, 1, 1)
    pixels = torch.from_numpy(data.train.images.copy()).to(device)
    images = ((pixels.float() / 255 - mean) / std).contiguous(memory_format=layout)
    labels = torch.from_numpy(data.train.labels.copy()).to(device)
    # As the trainable: fp16 with a GradScaler on CUDA, bf16 autocast on a CPU.
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda", enabled=settings.amp and device.type == "cuda")
    model.train()
    seconds = 0.0
    for _ in range(settings.epochs):
        synchronize(device)
        epoch_started = time.perf_counter()
        order = torch.randperm(len(labels), device=device)
        for start in range(0, len(labels), settings.batch_size):
            batch = order[start : start + settings.batch_size]
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=dtype, enabled=settings.amp):
                loss = F.cross_entropy(step_model(images[batch]), labels[batch])
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        synchronize(device)
        seconds = time.perf_counter() - epoch_started
    whole = time.perf_counter() - started
    return Rates(len(labels) / seconds, len(labels) * settings.epochs / whole)


def trainable_run(settings: TrainSettings, data: PreparedData) -> Rates:
    """The trainable as a search runs it (`fit_classifier`)."""
    reports: list[dict[str, Any]] = []
    started = time.perf_counter()
    fit_classifier(settings, data, lambda metrics, _: reports.append(metrics))
    whole = time.perf_counter() - started
    return Rates(reports[-1]["throughput"], len(data.train) * settings.epochs / whole)


def loop_part(epochs: int) -> Iterator[Row]:
    case = GPU_CASE if on_gpu() else CPU_CASE
    data = prepare_data(
        DataSettings(
            image_size=case.image_size,
            train_per_class=case.train_per_class,
            val_per_class=case.train_per_class // 4,
            test_per_class=case.train_per_class // 4,
        )
    )
    what = f"{case.model}, {case.image_size} px, batch {case.batch_size}, {len(data.train)} images"
    cases = [("fp32", {}, False), ("AMP", {"amp": True}, False),
             ("channels_last + AMP", {"amp": True, "channels_last": True}, True)]  # fmt: skip
    if on_gpu():  # a compile takes minutes on a CPU; the suite compiles once, on a tiny model
        cases.append(("channels_last + AMP + compile",
                      {"amp": True, "channels_last": True, "compile": True}, True))  # fmt: skip
    # The process's first run pays one-time costs (kernels loaded, allocator grown) that
    # neither side should carry: one untimed run first.
    bare_loop(TrainSettings(model=case.model, batch_size=case.batch_size, epochs=1), data)
    for label, switches, tuned in cases:
        settings = TrainSettings(model=case.model, batch_size=case.batch_size, epochs=epochs,
                                 train_eval_size=len(data.val), **switches)  # fmt: skip
        loop = "tuned loop" if tuned else "bare loop"
        if settings.compile:  # inductor's caches warm for both sides, not for the second only
            bare_loop(settings.model_copy(update={"epochs": 1}), data, tuned, compiled=True)
        bare = bare_loop(settings, data, tuned=tuned, compiled=settings.compile)
        trainable = trainable_run(settings, data)
        yield from [
            Row("loop", f"{loop}, {label}", bare.last_epoch, "images/s", what),
            Row("loop", f"trainable training part, {label}", trainable.last_epoch, "images/s",
                f"{trainable.last_epoch / bare.last_epoch:.2f}x the {loop}"),
            Row("loop", f"trainable whole run, {label}", trainable.whole_run, "images/s",
                f"{trainable.whole_run / bare.whole_run:.2f}x the {loop}'s whole run, "
                f"{epochs} epoch{'s' if epochs > 1 else ''}"),
        ]  # fmt: skip
    if not on_gpu():
        yield Row("loop", "trainable training part, channels_last + AMP + compile", None,
                  "images/s", "needs a GPU in this bench (the suite compiles once on CPU: "
                  "tests/trainables/test_layout_and_compile.py)")  # fmt: skip
    for precision, images_per_s in NVIDIA_A100_IMAGES_PER_S.items():
        reference = "A100 80GB, batch 256, DeepLearningExamples (reference)"
        yield Row("loop", f"NVIDIA's ResNet-50, {precision}", images_per_s, "images/s", reference)


# --- 2. the memory model against the card -----------------------------------------------------

MEMORY_BATCHES = (16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class LineError:
    """The memory model's line for one technique combination against what was measured."""

    label: str
    errors: dict[int, float]  # batch -> |predicted - measured| / measured
    out_of_memory: tuple[int, ...]  # batches the card could not hold (not scored)
    # batch -> the CPU meter's peak at the search's driver (what a memory model on a card
    # has before any trial of the group reported) / the measured reserved peak
    meter_ratios: dict[int, float]

    def mape(self, batches: tuple[int, ...]) -> float:
        scored = [self.errors[b] for b in batches if b in self.errors]
        return 100 * statistics.fmean(scored) if scored else math.nan


def line_errors(model: str, image_size: int) -> Iterator[LineError]:
    """For AMP x checkpointing: the reserved peak of a step at each of `MEMORY_BATCHES`
    (from an empty cache, as a trial's first step), and the line through the two probe
    batches' peaks (`CARD_PROBE_BATCHES`) against it, and the CPU meter at the driver
    (`search.feasibility.CpuMeterProbe`) against it."""
    from search.capacity import NUM_CLASSES, Prober
    from search.feasibility import CpuMeterProbe

    for amp in (False, True):
        for checkpointing in (False, True):
            label = " + ".join(
                [
                    name
                    for name, on in (("AMP", amp), ("activation checkpointing", checkpointing))
                    if on
                ]
                or ["fp32"]
            )
            settings = TrainSettings(model=model, amp=amp, activation_checkpointing=checkpointing,
                                     device="cuda" if on_gpu() else "cpu")  # fmt: skip
            prober = Prober(settings, image_size, budget_mb=None)
            measured = {}
            for batch in MEMORY_BATCHES:
                peak = prober.peak(batch, fresh=True)
                if peak is None:  # the card itself is full: larger batches are too
                    break
                measured[batch] = peak.reserved_bytes
            small, large = CARD_PROBE_BATCHES
            line = StepLine(small, large, measured[small], measured[large])
            errors = {b: abs(line.at(b) - peak) / peak for b, peak in measured.items()}
            missing = tuple(b for b in MEMORY_BATCHES if b not in measured)
            del prober
            on_cpu = settings.model_copy(
                update={"device": "cpu", "data": DataSettings(image_size=image_size)}
            )
            meter = CpuMeterProbe(NUM_CLASSES)(on_cpu)
            ratios = {b: meter(b) * MIB / peak for b, peak in measured.items()}
            yield LineError(label, errors, missing, ratios)


def memory_part() -> Iterator[Row]:
    model, size = ("resnet50", 224) if on_gpu() else ("small_cnn", 32)
    held_out = tuple(b for b in MEMORY_BATCHES if b not in CARD_PROBE_BATCHES)
    what = f"{model}, {size} px, reserved peak, probes at {CARD_PROBE_BATCHES}"
    if not on_gpu():
        what += "; the CPU meter (a stand-in: the largest of a few lines in the batch)"
    for result in line_errors(model, size):
        note = f"{what}; not held: {list(result.out_of_memory)}" if result.out_of_memory else what
        yield from [
            Row("memory", f"line MAPE, {result.label}, batches 16-512", result.mape(MEMORY_BATCHES),
                "%", note),
            Row("memory", f"line MAPE, {result.label}, batches off the probes",
                result.mape(held_out), "%", f"batches {list(held_out)}"),
            Row("memory", f"the driver's CPU meter / the peak, {result.label}",
                statistics.median(result.meter_ratios.values()), "ratio",
                "median; by batch " + " ".join(f"{b}: {r:.2f}"
                                               for b, r in result.meter_ratios.items())),
        ]  # fmt: skip


# --- 3. capacity on the card ------------------------------------------------------------------


def capacity_part(out_dir: Path) -> list[Row]:
    if not on_gpu():
        return [Row("capacity", "largest batch per technique, 11 GB share", None, "images",
                    "needs a GPU; the CPU meter's table: docs/RESULTS.md section 1")]  # fmt: skip
    from search.capacity import main as capacity

    def probed(row: Any) -> str:
        if pd.isna(row.probes):  # accumulation's: the largest physical batch, stepped k times
            return "derived from the row above, not probed"
        predicted = f"{row.predicted_batch_size:.0f}"
        return f"predicted {predicted}, {row.probes:.0f} probes, {row.seconds:.1f} s"

    csv_path = out_dir / "capacity.csv"
    config = str(REPO / "configs" / "deelvin_resnet50.yaml")
    started = time.perf_counter()
    capacity(["--config", config, "--out", str(csv_path), "--steps", "3",
              "resources.memory_budget_mb=11000"])  # fmt: skip
    seconds = time.perf_counter() - started
    table = pd.read_csv(csv_path)
    return [
        Row("capacity", "deelvin_resnet50 table, wall time", seconds, "s",
            f"{int(table['probes'].sum())} probes in all; goal 60 s on an H100-class card"),
        *(
            Row("capacity", f"largest batch, {row.technique}", row.effective_batch_size,
                "images", f"physical {row.max_batch_size} ({probed(row)}), peak "
                f"{row.peak_mem_mb:.0f} MiB, step {row.step_time_s:.3f} s")
            for row in table.itertuples()
        ),
    ]  # fmt: skip


# --- 4. four trials to a card ------------------------------------------------------------------


@contextmanager
def card_memory_peak() -> Iterator[Callable[[], float]]:
    """The card's used memory (nvidia-smi, every process on it), its peak while inside."""
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if out.returncode == 0 and out.stdout.strip():
                peak[0] = max(peak[0], float(out.stdout.split()[0]))
            done.wait(0.5)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: peak[0]
    finally:
        done.set()
        thread.join()


PACKING_EPOCHS = 6


def packing_part(epochs: int) -> list[Row]:
    """Four 0.25-GPU trials of the tuned loop's config together against one alone and
    against the tuned loop itself: every image trained over the wall time from the first
    trial's start to the last one's end (a trial's start and evaluation included)."""
    if not on_gpu():
        return [Row("packing", "four 0.25-GPU trials / the tuned loop", None, "ratio",
                    "needs a GPU")]  # fmt: skip
    import ray
    from ray import tune

    from trainables import train_classifier

    # Enough training that four trials take about ten seconds each: Tune's timestamps are
    # whole seconds, and a trial's start and evaluation weigh on a short run.
    data = prepare_data(DataSettings(image_size=224, train_per_class=1024, val_per_class=64,
                                     test_per_class=64))  # fmt: skip
    epochs = max(epochs, PACKING_EPOCHS)
    config = {"model": "resnet50", "batch_size": 128, "amp": True, "channels_last": True,
              "epochs": epochs, "train_eval_size": 64, "checkpoint_every": epochs}  # fmt: skip
    # The trials first: the card's peak is then theirs, not this process's cached blocks of
    # the tuned loop (which runs after them).
    ray.init(
        address="local", num_cpus=16, num_gpus=1, include_dashboard=False, configure_logging=False
    )
    results, reported = {}, {}
    try:
        for trials in (1, 4):
            trainable = tune.with_resources(
                tune.with_parameters(train_classifier, data=data), {"cpu": 3, "gpu": 0.25}
            )
            with tempfile.TemporaryDirectory() as storage, card_memory_peak() as peak:
                grid = tune.Tuner(
                    trainable,
                    param_space={**config, "seed": tune.grid_search(list(range(trials)))},
                    run_config=tune.RunConfig(storage_path=storage, verbose=0),
                ).fit()
                ends = [r.metrics["timestamp"] for r in grid]
                starts = [r.metrics["timestamp"] - r.metrics["time_total_s"] for r in grid]
                images = trials * epochs * len(data.train)
                results[trials] = (images / (max(ends) - min(starts)), peak(), grid.num_errors)
                # What each trial reported: the config's speed timed in the device's gate,
                # and what it got while sharing the card (the speed issue's card goal).
                reported[trials] = {
                    metric: [float(r.metrics.get(metric) or math.nan) for r in grid]
                    for metric in ("throughput", "shared_throughput")
                }
    finally:
        ray.shutdown()
    tuned = bare_loop(TrainSettings(**config), data, tuned=True).last_epoch
    alone, together = results[1], results[4]
    what = "resnet50, 224 px, batch 128, channels_last + AMP"
    return [
        Row("packing", "tuned loop alone", tuned, "images/s", what),
        Row("packing", "one 0.25-GPU trial alone, over its wall time", alone[0], "images/s",
            f"card peak {alone[1]:.0f} MiB"),
        Row("packing", "four 0.25-GPU trials together, over their wall time", together[0],
            "images/s", f"card peak {together[1]:.0f} MiB, errors {together[2]}"),
        Row("packing", "four together / the tuned loop", together[0] / tuned, "ratio",
            f"{what}; goal 0.9 or more"),
        *(
            Row("packing", f"a trial's {metric}, four together / one alone",
                statistics.median(reported[4][metric]) / reported[1][metric][0], "ratio",
                f"alone {reported[1][metric][0]:.0f}, the four "
                + " ".join(f"{value:.0f}" for value in reported[4][metric])
                + " images/s" + ("; goal 0.95-1.05" if metric == "throughput" else ""))
            for metric in ("throughput", "shared_throughput")
        ),
    ]  # fmt: skip


# --- a shrunk configs/cats_dogs_gpu.yaml search, as the oom and by_memory parts run it -------


SEARCHES = "searches"


def shrunk_gpu_search(
    out_dir: Path, name: str, trials: int, overrides: list[str]
) -> tuple[pd.DataFrame | None, float, str]:
    """`python -m search.run` of configs/cats_dogs_gpu.yaml with `trials` suggestions of 2
    epochs on 200/50/50 images a class, never compiled, no ablations, in `out_dir`: (its
    trials table, None where it failed; its wall seconds; why it failed). Its progress goes
    to `<name>.log`, its results under `SEARCHES` (left out of what bench/on_device.py
    brings back)."""
    storage = out_dir / SEARCHES / name
    command = [
        sys.executable, "-m", "search.run",
        "--config", str(REPO / "configs" / "cats_dogs_gpu.yaml"), "--name", name,
        f"search.num_samples={trials}", "train.epochs=2", "search.ablation=null",
        "data.train_per_class=200", "data.val_per_class=50", "data.test_per_class=50",
        f"run.storage_path={storage}", f"tracking.uri=sqlite:///{out_dir / 'mlflow.db'}",
        # compiling ResNet-50 took over a minute a trial (an H200, 2026-11-27): these parts
        # measure memory, and must end inside their limits
        "space.compile={choice: [false]}",
        *overrides,
    ]  # fmt: skip
    log = out_dir / f"{name}.log"  # the search's own progress, as it goes
    started = time.perf_counter()
    with log.open("w") as output:
        finished = subprocess.run(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT,
                                  check=False)  # fmt: skip
    seconds = time.perf_counter() - started
    report = storage / name / "report" / "trials.csv"
    if finished.returncode != 0 or not report.exists():
        return None, seconds, f"exit {finished.returncode}: {log.read_text()[-300:]}"
    return pd.read_csv(report), seconds, ""


# --- 4b. trials packed by predicted memory against a fixed quarter ----------------------------


PACKED_SEARCH_TRIALS = 12


def by_memory_part(out_dir: Path) -> Iterator[Row]:
    if not on_gpu():
        yield Row("by_memory", "trials per hour, packed by memory / a fixed quarter", None,
                  "ratio", "needs a GPU (trials share a card)")  # fmt: skip
        return
    what = f"{PACKED_SEARCH_TRIALS} suggestions, 2 epochs, 1 CPU a trial"
    per_hour = {}
    for pack in ("fixed", "memory"):
        overrides = ["search.max_concurrent_trials=null", "resources.cpu=1",
                     "resources.gpu=0.25", f"resources.pack={pack}"]  # fmt: skip
        name = f"gpu-pack-{pack}"
        trials, seconds, failure = shrunk_gpu_search(out_dir, name, PACKED_SEARCH_TRIALS, overrides)
        if trials is None:
            yield Row("by_memory", f"{pack}: the search", None, "trials", failure)
            return
        statuses = trials["status"].value_counts()
        trained = int(statuses.sum() - statuses.get("oom_predicted", 0))
        per_hour[pack] = trained / seconds * 3600
        yield Row("by_memory", f"{pack}: trials trained per hour", per_hour[pack], "trials/h",
                  f"{trained} in {seconds:.0f} s; {what}")  # fmt: skip
        # whether packing acted: a fixed quarter runs four at most (RESULTS 35: so did the
        # packed search, whose model could size no share)
        at_once = most_running((out_dir / f"{name}.log").read_text())
        yield Row("by_memory", f"{pack}: most trials at once", at_once, "trials",
                  "the search's progress lines")  # fmt: skip
        yield Row("by_memory", f"{pack}: trials ended out of memory",
                  int(statuses.get(STATUS_OOM, 0)), "trials", what)  # fmt: skip
    yield Row("by_memory", "trials per hour, packed by memory / a fixed quarter",
              per_hour["memory"] / per_hour["fixed"], "ratio",
              "one search each, fixed first; goal above 1 with no more OOMs")  # fmt: skip


def most_running(log: str) -> int:
    """The most trials a search's progress lines (`search.progress`) showed running."""
    return max((int(count) for count in re.findall(r"(\d+) RUNNING", log)), default=0)


# --- 5. out-of-memory trials on the card ----------------------------------------------------


OOM_SEARCH_TRIALS = 8


def oom_part(out_dir: Path) -> Iterator[Row]:
    if not on_gpu():
        yield Row("oom", "an over-share trial, start to pruned report", None, "steps",
                  "needs a GPU; on CPU: python bench/oom_cost.py")  # fmt: skip
        yield Row("oom", "shrunk cats_dogs_gpu search", None, "trials",
                  "needs a GPU (the config asks for one)")  # fmt: skip
        return
    data = prepare_data(DataSettings(image_size=224, train_per_class=128))
    fits = TrainSettings(model="resnet50", batch_size=16, epochs=1, memory_budget_mb=6000)
    over = fits.model_copy(update={"batch_size": 512})
    reports: list[dict[str, Any]] = []
    step_seconds, oom_seconds = [], []
    for _ in range(3):
        fit_classifier(fits, data, lambda metrics, _: reports.append(metrics))
        step_seconds.append(reports[-1]["epoch_time_s"] / reports[-1]["train_steps"])
        started = time.perf_counter()
        fit_classifier(over, data, lambda metrics, _: reports.append(metrics))
        oom_seconds.append(time.perf_counter() - started)
        assert reports[-1]["status"] == STATUS_OOM, reports[-1]["status_detail"]
    steps = statistics.median(oom_seconds) / statistics.median(step_seconds)
    yield Row("oom", "an over-share trial, start to pruned report", steps, "steps",
              "resnet50 batch 512 under 6000 MiB, against a step at batch 16")  # fmt: skip
    what = f"{OOM_SEARCH_TRIALS} suggestions, 2 epochs, 6000 MiB per trial"
    # (not "gpu-oom": the part's own log is gpu-oom.log)
    trials, _, failure = shrunk_gpu_search(out_dir, "oom-search", OOM_SEARCH_TRIALS,
                                           ["resources.memory_budget_mb=6000"])  # fmt: skip
    if trials is None:
        yield Row("oom", "shrunk cats_dogs_gpu search", None, "trials", failure)
        return
    statuses = trials["status"].value_counts()
    for status in STATUS_ORDER:
        yield Row("oom", f"search trials ended {status}", int(statuses.get(status, 0)),
                  "trials", what)  # fmt: skip
    predicted = trials.get(PREDICTED_PEAK_COLUMN, pd.Series(math.nan, index=trials.index))
    ran_out = (trials["status"] == STATUS_OOM) & predicted.notna()
    yield Row("oom", "trials predicted to fit that ran out", int(ran_out.sum()), "trials",
              f"of {int(predicted.notna().sum())} the memory model predicted")  # fmt: skip


# --- 6. the card's own facts: its context growing, its errors at a limit -------------------


def _outside_allocator_mib(card: Any) -> float | None:
    process = card.process_bytes()
    return None if process is None else (process - card.reserved_bytes()) / 2**20


def _one_step(model: torch.nn.Module, batch: int, amp: bool, layout: torch.memory_format) -> None:
    images = torch.randn(batch, 3, 224, 224, device="cuda").contiguous(memory_format=layout)
    labels = torch.randint(0, 10, (batch,), device="cuda")
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = F.cross_entropy(model(images), labels)
    loss.backward()
    synchronize(images.device)


def card_part() -> Iterator[Row]:
    """What a trial's memory model assumes of the card, read off it: the memory this process
    holds outside PyTorch's allocator after the tiny kernels a trial measures it after
    (`trainables.cuda.load_kernels`), and as the real model's kernels load (cuDNN's engines
    for its shapes, the autotuner's, AMP's, channels-last's, a compiled step's); and the
    error each step raises when it does not fit under an allocator limit (which of them
    `trainables.oom` takes for out of memory)."""
    if not on_gpu():
        yield Row("card", "memory outside the allocator", None, "MiB", "needs a GPU")
        return
    from trainables.cuda import TorchCudaCard, load_kernels
    from trainables.oom import is_out_of_memory

    card = TorchCudaCard(torch.device("cuda"))
    load_kernels(card.device)
    measured = _outside_allocator_mib(card)
    if measured is None:
        yield Row("card", "memory outside the allocator", None, "MiB", "NVML cannot see it")
        return
    yield Row("card", "outside the allocator, after the tiny kernels", measured, "MiB",
              "what a trial measures and budgets for")  # fmt: skip
    model = build_model("resnet50", 10, 224).cuda()
    steps = [("resnet50 fp32 step", False, torch.contiguous_format, False),
             ("+ AMP step", True, torch.contiguous_format, False),
             ("+ channels_last AMP step", True, torch.channels_last, False),
             ("+ the cuDNN autotuner", True, torch.channels_last, True)]  # fmt: skip
    for label, amp, layout, autotuner in steps:
        torch.backends.cudnn.benchmark = autotuner
        model = model.to(memory_format=layout)
        _one_step(model, 32, amp, layout)
        now = _outside_allocator_mib(card) or math.nan
        yield Row("card", f"outside the allocator, after {label}", now, "MiB",
                  f"{now - measured:+.0f} MiB over the tiny kernels' figure")  # fmt: skip
    compiled = torch.compile(build_model("resnet18", 10, 224).cuda())
    _one_step(compiled, 32, True, torch.contiguous_format)
    now = _outside_allocator_mib(card) or math.nan
    yield Row("card", "outside the allocator, after a compiled resnet18 step", now, "MiB",
              f"{now - measured:+.0f} MiB over the tiny kernels' figure")  # fmt: skip
    del model, compiled
    card.release_cached()
    # Near a limit: each error a step raises, and whether it is taken for out of memory.
    total = card.total_bytes()
    for autotuner in (False, True):
        torch.backends.cudnn.benchmark = autotuner
        card.set_allocator_fraction(3 * 2**30 / total)
        model = build_model("resnet50", 10, 224).cuda().to(memory_format=torch.channels_last)
        seen: dict[str, tuple[int, bool]] = {}
        for batch in (32, 64, 96, 128, 160, 192, 256, 384, 512):
            try:
                _one_step(model, batch, True, torch.channels_last)
            except Exception as error:  # what the card raises is the measurement
                first = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:90]}"
                seen.setdefault(first, (batch, is_out_of_memory(error)))
            model.zero_grad(set_to_none=True)
            card.release_cached()
        where = f"error at the limit, autotuner {'on' if autotuner else 'off'}"
        for message, (batch, taken) in seen.items():
            verdict = "OOM" if taken else "NOT taken for OOM"
            yield Row("card", where, batch, "batch", f"{verdict}: {message}")
        del model
        card.release_cached()
    card.set_allocator_fraction(1.0)


# --- the table --------------------------------------------------------------------------------


def render(rows: list[Row]) -> str:
    lines = [f"{'part':9s} {'measurement':48s} {'value':>10s} {'unit':9s} note"]
    for row in rows:
        value = "not here" if row.value is None else f"{row.value:10.4g}"
        lines.append(f"{row.part:9s} {row.measurement:48s} {value:>10s} {row.unit:9s} {row.note}")
    return "\n".join(lines)


CSV_HEADER = ["device", "part", "measurement", "value", "unit", "note"]


def write_csv(rows: Iterable[Row], path: Path, device: str) -> None:
    """Each row written and flushed as it comes: a part stopped at its time limit keeps
    every row it measured before."""
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(CSV_HEADER)
        file.flush()
        for row in rows:
            writer.writerow([device, row.part, row.measurement, row.value, row.unit, row.note])
            file.flush()


def read_csv(path: Path) -> list[Row]:
    if not path.exists():
        return []
    with path.open() as file:
        return [
            Row(row["part"], row["measurement"], float(row["value"]) if row["value"] else None,
                row["unit"], row["note"])
            for row in csv.DictReader(file)
        ]  # fmt: skip


def run_part(part: str, epochs: int, out_dir: Path) -> Iterable[Row]:
    if part == "loop":
        return loop_part(epochs)
    if part == "memory":
        return memory_part()
    if part == "capacity":
        return capacity_part(out_dir)
    if part == "packing":
        return packing_part(epochs)
    if part == "by_memory":
        return by_memory_part(out_dir)
    if part == "card":
        return card_part()
    return oom_part(out_dir)


def part_in_own_process(part: str, epochs: int, out_dir: Path, timeout_s: float) -> list[Row]:
    """One part in a process of its own, so that each starts on an empty card: no CUDA
    context, cached allocator blocks or Ray instance left by the part before; one that
    runs past `timeout_s` is stopped, with all it started, and said so, and the next runs.
    Without a GPU, a part that only says so is answered here (a process costs seconds)."""
    if not on_gpu() and part in GPU_ONLY:
        return list(run_part(part, epochs, out_dir))
    csv_path = out_dir / f"gpu-{part}.csv"
    log = out_dir / f"gpu-{part}.log"
    command = [sys.executable, __file__, "--parts", part, "--out", str(csv_path),
               "--epochs", str(epochs), "--in-process"]  # fmt: skip
    code = run_limited(command, log, timeout_s)
    measured = read_csv(csv_path)  # what it wrote before it ended, or was stopped
    if code is None:
        note = f"stopped after {timeout_s:.0f} s; its output: {log.name}"
        return [*measured, Row(part, "the part ran out of time", None, "", note)]
    if code != 0:
        why = (log.read_text().strip().splitlines() or ["no output"])[-1][:200]
        return [*measured, Row(part, "the part failed", None, "", f"exit {code}: {why}")]
    return measured


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--out", type=Path, default=Path("gpu.csv"), help="the CSV")
    parser.add_argument("--epochs", type=int, default=2, help="per timed run (the last counts)")
    parser.add_argument("--part-timeout", type=float, default=None,
                        help=f"seconds each part may run (default: {PART_SECONDS})")  # fmt: skip
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    device = device_name()
    out_dir = args.out.resolve().parent
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.in_process:  # one part, in the process `part_in_own_process` started
        write_csv(run_part(args.parts[0], args.epochs, out_dir), args.out, device)
        return
    print(f"device: {device}", flush=True)
    rows: list[Row] = []
    for part in args.parts:
        started = time.perf_counter()
        limit = args.part_timeout or PART_SECONDS[part]
        rows += part_in_own_process(part, args.epochs, out_dir, limit)
        print(f"  {part}: {time.perf_counter() - started:.0f} s", flush=True)
    print(render(rows))
    write_csv(rows, args.out, device)
    print(f"Written to {args.out}")


if __name__ == "__main__":
    main()
