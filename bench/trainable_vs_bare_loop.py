"""The trainable's epochs against a bare PyTorch loop, side by side.

Same model, data tensors, batch size, epochs and thread count; the runs alternate so that
drift in the machine's speed falls on both. Prints seconds per epoch and the ratio
trainable / bare: for the training part alone (what `throughput` measures) and for the
whole run per epoch (training + evaluation + the checkpoint + the trial's start). As the
default search (configs/cats_dogs.yaml) trains a trial: 8 epochs, validation scored every
epoch, the training subset and the test split at the early-stopping rungs (gap epochs 1,
2 and 4) and the last.

A bare loop that scores nothing leaves out work the search needs (the best epoch, the gaps
the rungs compare), so the whole run is also set against the bare loop scoring the same
images as the trainable's last run did: validation every epoch, the training subset and
the test split as many times, forward only at the training batch (the trainable scores at
the batch its own timing chose, so this ratio holds that choice too). That ratio is near
the trainable's own cost; the one against the bare loop alone adds the scoring's.

    python bench/trainable_vs_bare_loop.py [--model small_cnn] [--image-size 64]
        [--batch-size 64] [--epochs 8] [--gap-epochs 1 2 4] [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from trainables.classifier import fit_classifier
from trainables.data import DataSettings, PreparedData, prepare_data
from trainables.data.prepared import Split
from trainables.host_memory import hold_host_allocator
from trainables.models import build_model
from trainables.settings import TrainSettings
from trainables.trial import build_optimizer


def bare_epoch(
    settings: TrainSettings, data: PreparedData, gap_scorings: int | None = None
) -> float:
    """Seconds per epoch of the loop anyone would write: float tensors prepared up front,
    shuffle, step. With `gap_scorings` (None: it scores nothing) it also scores validation
    after every epoch and, after that many of the first epochs, the training subset and the
    test split (eval mode, no gradients, at the training batch): the trainable scores them
    at its gap epochs instead, the same work at other epochs."""
    torch.manual_seed(settings.seed)
    model = build_model(settings.model, data.num_classes, data.image_size)
    optimizer = build_optimizer(settings, model.parameters())
    mean = torch.tensor(data.mean).view(1, 3, 1, 1)
    std = torch.tensor(data.std).view(1, 3, 1, 1)

    def floats(split: Split) -> tuple[torch.Tensor, torch.Tensor]:
        images = (torch.from_numpy(split.images.copy()).float() / 255 - mean) / std
        return images, torch.from_numpy(split.labels.copy())

    images, labels = floats(data.train)
    val, test = floats(data.val), floats(data.test)
    subset = torch.randperm(len(labels))[: settings.train_eval_size]
    train_eval = (images[subset], labels[subset])
    started = time.perf_counter()
    for epoch in range(settings.epochs):
        model.train()
        order = torch.randperm(len(labels))
        for start in range(0, len(labels), settings.batch_size):
            batch = order[start : start + settings.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(images[batch]), labels[batch])
            loss.backward()
            optimizer.step()
        if gap_scorings is not None:
            scored = [val, train_eval, test] if epoch < gap_scorings else [val]
            for split in scored:
                accuracy(model, *split, settings.batch_size)
    return (time.perf_counter() - started) / settings.epochs


@torch.inference_mode()
def accuracy(
    model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, batch: int
) -> float:
    """The share of `images` classified as `labels`, forward only, `batch` at a time."""
    model.eval()
    correct = sum(
        int((model(images[start : start + batch]).argmax(1) == labels[start : start + batch]).sum())
        for start in range(0, len(labels), batch)
    )
    return correct / len(labels)


def trainable_epoch(settings: TrainSettings, data: PreparedData) -> tuple[float, float, int]:
    """Per epoch: (training seconds as the trainable measures them, whole seconds), and
    how many times the training subset and test split were scored: on an epoch's own
    weights (its `test_acc` is there), or on a waiting best epoch's at a gap epoch or the
    last (its gaps were NaN until then)."""
    reported: list[dict[str, Any]] = []

    def keep(metrics: dict[str, Any], checkpoint_dir: Path) -> None:
        reported.append(metrics)

    started = time.perf_counter()
    fit_classifier(settings, data, keep)
    whole = time.perf_counter() - started
    scorings, waiting = 0, False
    for metrics in reported:
        scored_own = math.isfinite(metrics["test_acc"])
        improved = metrics["best_epoch"] == metrics["epoch"]
        scorings += scored_own + (waiting and not improved and math.isfinite(metrics["gen_gap"]))
        waiting = math.isnan(metrics["gen_gap"])
    return reported[-1]["train_time_s"] / settings.epochs, whole / settings.epochs, scorings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--model", default="small_cnn", help="small_cnn, resnet18 or resnet50")
    parser.add_argument("--image-size", type=int, default=64, help="px, square")
    parser.add_argument("--batch-size", type=int, default=64, help="images per training step")
    parser.add_argument("--epochs", type=int, default=8, help="epochs per run")
    parser.add_argument(
        "--gap-epochs", type=int, nargs="*", default=[1, 2, 4],
        help="epochs that score the best epoch's gaps (the search's early-stopping rungs)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timings per measurement (the median is printed)"
    )
    args = parser.parse_args()
    # both loops run in this process: the trainable fixes its allocator's thresholds
    # (trainables.host_memory), so the bare loop runs with them from the start too
    hold_host_allocator()

    torch.set_num_threads(args.threads)
    data = prepare_data(DataSettings(image_size=args.image_size))
    settings = TrainSettings(
        model=args.model,
        batch_size=args.batch_size,
        epochs=args.epochs,
        gap_epochs=args.gap_epochs,
        device="cpu",
    )
    bare_epoch(settings, data)  # warm-up: allocator, kernels
    _, _, scored = trainable_epoch(settings, data)  # and how many times it scores the gaps
    bare, bare_scoring, train_part, whole = [], [], [], []
    for _ in range(args.repeats):
        bare.append(bare_epoch(settings, data))
        bare_scoring.append(bare_epoch(settings, data, gap_scorings=scored))
        train_seconds, epoch_seconds, scored = trainable_epoch(settings, data)
        train_part.append(train_seconds)
        whole.append(epoch_seconds)

    median = statistics.median
    print(
        f"{args.model}, {args.image_size} px, batch {args.batch_size}, {args.threads} thread(s), "
        f"{len(data.train)} training images, {args.epochs} epochs, median of {args.repeats}"
    )
    print(f"  bare PyTorch loop:           {median(bare):.3f} s/epoch")
    print(f"  bare loop, scoring the same: {median(bare_scoring):.3f} s/epoch")
    print(f"  trainable, training part:    {median(train_part):.3f} s/epoch")
    print(f"  trainable, whole run:        {median(whole):.3f} s/epoch (+ eval, checkpoint)")
    print(f"  ratio training part / bare:  {median(train_part) / median(bare):.2f}")
    print(f"  ratio whole epoch / bare:    {median(whole) / median(bare):.2f}")
    print(f"  ratio whole epoch / bare loop scoring the same: "
          f"{median(whole) / median(bare_scoring):.2f}")  # fmt: skip
    print(
        f"  scorings of the training subset and test split, last run: {scored} in {args.epochs} "
        "epochs"
    )


if __name__ == "__main__":
    main()
