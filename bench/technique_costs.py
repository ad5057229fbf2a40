"""Each batch-size technique's training time and memory relative to the baseline.

The rows are the technique table's (`trainables.techniques`): the baseline, each technique
switched on, and those that may save memory together (as in the capacity table). Every row
trains the same model on the same data at the same effective batch (accumulation divides
the physical batch), in one process, alternating rows over several rounds so that drift in
the machine's speed falls on all of them; times are the median over rounds of the
trainable's own `epoch_time_s` (the training part of an epoch), memory is its `peak_mem_mb`
(the CPU meter, or CUDA's peak).

    python bench/technique_costs.py [--model resnet18] [--image-size 64] [--batch-size 64]
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
from trainables.techniques import TECHNIQUES


def rows() -> dict[str, dict[str, Any]]:
    """Row name -> the settings it switches on, from the technique table."""
    # together: those that may save memory, as the capacity table's last row combines them
    # (compile, whose memory is its own graph's, stays a row of its own)
    savers = [t for t in TECHNIQUES.values() if t.memory in ("saves", "mixed") and t.capacity_row]
    table = {"baseline": {}}
    table |= {t.shown: {t.key: t.on} for t in TECHNIQUES.values()}
    if len(savers) > 1:
        table[" + ".join(t.shown for t in savers)] = {t.key: t.on for t in savers}
    return table


def epoch_figures(settings: TrainSettings, data) -> tuple[float, float]:
    """(training seconds, peak MiB) of the second epoch: the first warms caches up."""
    reports: list[dict[str, Any]] = []

    def keep(metrics: dict[str, Any], checkpoint_dir: Path | None) -> None:
        reports.append(metrics)

    fit_classifier(settings, data, keep)
    return reports[-1]["epoch_time_s"], reports[-1]["peak_mem_mb"]


def settings_for(switches: dict[str, Any], args: argparse.Namespace) -> TrainSettings:
    accumulation = int(switches.get("accumulation_steps", 1))
    return TrainSettings(
        model=args.model,
        batch_size=max(1, args.batch_size // accumulation),  # the same effective batch
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
    table = rows()
    times: dict[str, list[float]] = {name: [] for name in table}
    memory: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, switches in table.items():
            seconds, peak = epoch_figures(settings_for(switches, args), data)
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
    for name in table:
        seconds = statistics.median(times[name])
        print(
            f"{name:34s} {seconds:8.3f} {seconds / base_time:7.2f} "
            f"{memory[name]:9.1f} {memory[name] / base_memory:9.2f}"
        )


if __name__ == "__main__":
    main()
