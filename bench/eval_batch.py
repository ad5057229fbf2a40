"""Seconds to score the validation split at each evaluation batch and layout, per model,
side by side.

Why a trial times its evaluation batch and layout (`trainables.eval_choice`): the fastest
way to run a forward-only pass differs between models on one machine. Each model (in the
contiguous layout it trains in by default) scores the same 400 validation images in eval
mode at every batch, its batches contiguous and then channels-last, runs alternating, and
the ratio to the training batch (`--batch-size`) contiguous is printed: below 1, that way
scores faster. The process's allocator is held as a trial's is (`trainables.host_memory`).

    python bench/eval_batch.py [--batch-size 64] [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trainables.data import DataSettings, prepare_data
from trainables.eval_choice import LAYOUTS
from trainables.host_memory import hold_host_allocator
from trainables.models import build_model
from trainables.settings import TrainSettings
from trainables.training import evaluate
from trainables.trial import TrialData, memory_format_named

MODELS = (("small_cnn", 32), ("small_cnn", 64), ("resnet18", 64), ("shufflenet_v2_x0_5", 64))
BATCHES = (16, 32, 64, 128, 256)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--batch-size", type=int, default=64, help="the training batch")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--repeats", type=int, default=3, help="timings per batch (median)")
    args = parser.parse_args()
    hold_host_allocator()  # as a trial's process is held
    torch.set_num_threads(args.threads)
    batches = sorted({*BATCHES, args.batch_size})
    print(f"seconds to score 400 validation images, {args.threads} thread(s), median of "
          f"{args.repeats}; (x): / the training batch {args.batch_size}")  # fmt: skip
    for name, size in MODELS:
        data = prepare_data(DataSettings(image_size=size))
        splits = TrialData.of(data, torch.device("cpu"), TrainSettings(model=name))
        model = build_model(name, data.num_classes, size)
        layouts = {layout: splits.normalise.laid_out(memory_format_named(layout))
                   for layout in LAYOUTS}  # fmt: skip
        timings = {(batch, layout): [] for layout in LAYOUTS for batch in batches}
        for normalise in layouts.values():  # warm-up
            evaluate(model, splits.val, normalise, batch_size=args.batch_size)
        for _ in range(args.repeats):
            for batch, layout in timings:
                started = time.perf_counter()
                evaluate(model, splits.val, layouts[layout], batch_size=batch)
                timings[batch, layout].append(time.perf_counter() - started)
        seconds = {way: statistics.median(times) for way, times in timings.items()}
        base = seconds[args.batch_size, LAYOUTS[0]]
        for layout in LAYOUTS:
            cells = "  ".join(f"{b}: {seconds[b, layout]:.3f} ({seconds[b, layout] / base:.2f})"
                              for b in batches)  # fmt: skip
            print(f"  {name} {size} px {layout:<13} {cells}")


if __name__ == "__main__":
    main()
