"""Each batch-size technique's training time and memory relative to the baseline.

Every row trains the same model on the same data at the same effective batch, in one
process, alternating rows over several rounds so that drift in the machine's speed falls on
all of them; times are the median over rounds of the trainable's own `epoch_time_s` (the
training part of an epoch), memory is its `peak_mem_mb` (the CPU meter, or CUDA's peak).

    python bench/techniques.py [--model resnet18] [--image-size 64] [--batch-size 64]
        [--rounds 3] [--train-per-class 256] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import torch

from trainables.classifier import fit_classifier
from trainables.cuda import available
from trainables.data import DataSettings, prepare_data
from trainables.settings import TrainSettings

TECHNIQUES: dict[str, dict[str, Any]] = {
    "baseline": {},
    "amp": {"amp": True},
    "grad_checkpointing": {"grad_checkpointing": True},
    "amp + grad_checkpointing": {"amp": True, "grad_checkpointing": True},
    "accumulation x4 (batch/4 micro)": {"accumulation_steps": 4, "micro": 4},
    "cudnn_benchmark": {"cudnn_benchmark": True},
    "augment": {"augment": True},
}


def epoch_figures(settings: TrainSettings, data) -> tuple[float, float]:
    """(training seconds, peak MiB) of the second epoch: the first warms caches up."""
    reports: list[dict[str, Any]] = []

    def keep(metrics: dict[str, Any], checkpoint_dir: Path | None) -> None:
        reports.append(metrics)

    fit_classifier(settings, data, keep)
    return reports[-1]["epoch_time_s"], reports[-1]["peak_mem_mb"]


def settings_for(name: str, args: argparse.Namespace) -> TrainSettings:
    switches = dict(TECHNIQUES[name])
    batch = args.batch_size
    if switches.pop("micro", None):
        batch //= switches["accumulation_steps"]
    return TrainSettings(
        model=args.model,
        batch_size=batch,
        epochs=2,
        train_eval_size=32,
        eval_batch_size=64,
        device="cuda" if available() else "cpu",
        **switches,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--model", default="resnet18", help="small_cnn, resnet18 or resnet50")
    parser.add_argument("--image-size", type=int, default=64, help="px, square")
    parser.add_argument("--batch-size", type=int, default=64, help="images per training step")
    parser.add_argument(
        "--train-per-class", type=int, default=256, help="training images per class"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds over all techniques (the median is printed)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = prepare_data(
        DataSettings(
            image_size=args.image_size,
            train_per_class=args.train_per_class,
            val_per_class=16,
            test_per_class=16,
        )
    )
    times: dict[str, list[float]] = {name: [] for name in TECHNIQUES}
    memory: dict[str, float] = {}
    for _ in range(args.rounds):
        for name in TECHNIQUES:
            seconds, peak = epoch_figures(settings_for(name, args), data)
            times[name].append(seconds)
            memory[name] = peak
    device = "cuda" if available() else f"cpu, {args.threads} threads"
    print(
        f"{args.model} at {args.image_size} px, effective batch {args.batch_size}, "
        f"{len(data.train)} training images, {device}, median of {args.rounds} rounds"
    )
    base_time = statistics.median(times["baseline"])
    base_memory = memory["baseline"]
    print(f"{'technique':34s} {'s/epoch':>8s} {'time x':>7s} {'peak MiB':>9s} {'memory x':>9s}")
    for name in TECHNIQUES:
        seconds = statistics.median(times[name])
        print(
            f"{name:34s} {seconds:8.3f} {seconds / base_time:7.2f} "
            f"{memory[name]:9.1f} {memory[name] / base_memory:9.2f}"
        )


if __name__ == "__main__":
    main()
