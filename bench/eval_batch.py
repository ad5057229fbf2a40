"""Seconds to score the validation split at each evaluation batch, per model, side by side.

Why a trial times its evaluation batch (`trainables.eval_batch`): the fastest batch for a
forward-only pass differs between models on one machine. Each model scores the same 400
validation images in eval mode at every batch, runs alternating, and the ratio to the
training batch (`--batch-size`) is printed: below 1, that batch scores faster.

    python bench/eval_batch.py [--batch-size 64] [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trainables.data import DataSettings, prepare_data
from trainables.models import build_model
from trainables.settings import TrainSettings
from trainables.training import evaluate
from trainables.trial import TrialData

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
    torch.set_num_threads(args.threads)
    batches = sorted({*BATCHES, args.batch_size})
    print(f"seconds to score 400 validation images, {args.threads} thread(s), median of "
          f"{args.repeats}; (x): / the training batch {args.batch_size}")  # fmt: skip
    for name, size in MODELS:
        data = prepare_data(DataSettings(image_size=size))
        splits = TrialData.of(data, torch.device("cpu"), TrainSettings(model=name))
        model = build_model(name, data.num_classes, size)
        timings: dict[int, list[float]] = {batch: [] for batch in batches}
        evaluate(model, splits.val, splits.normalise, batch_size=args.batch_size)  # warm-up
        for _ in range(args.repeats):
            for batch in batches:
                started = time.perf_counter()
                evaluate(model, splits.val, splits.normalise, batch_size=batch)
                timings[batch].append(time.perf_counter() - started)
        seconds = {batch: statistics.median(times) for batch, times in timings.items()}
        base = seconds[args.batch_size]
        cells = "  ".join(f"{b}: {s:.3f} ({s / base:.2f})" for b, s in seconds.items())
        print(f"  {name} {size} px  {cells}")


if __name__ == "__main__":
    main()
