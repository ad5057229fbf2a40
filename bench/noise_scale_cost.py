"""What measuring the gradient noise scale costs an epoch, side by side.

The same epoch (model, data, order, batch) trained with the noise scale measured and
without, alternating so that drift in the machine's speed falls on both. Two cases:

- without accumulation: `noise_splits` steps of the epoch trained as two halves (the
  default, 4) against none;
- with accumulation: every step measured (the micro-batches' gradient norms, read by
  hooks; a trial's way until 2026-12-07), and the steps a trial measures now
  (`DEFAULT_NOISE_SPLITS` of them, `trainables.training.with_noise_splits`), against no
  step measured.

Prints the median training seconds of each and the ratios measured / not measured. `--amp`
trains in bf16 autocast, as a CPU trial with AMP does.

    python bench/noise_scale_cost.py [--model small_cnn] [--image-size 32]
        [--batch-size 32] [--accumulation 4] [--threads 1] [--repeats 7] [--amp]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from trainables.data import DataSettings, PreparedData, prepare_data
from trainables.models import build_model
from trainables.noise_scale import NoiseMeter
from trainables.precision import precision_for
from trainables.schedules import EpochSchedule
from trainables.settings import DEFAULT_NOISE_SPLITS, TrainSettings
from trainables.training import EpochSteps, HostSplit, Normaliser, train_epoch
from trainables.trial import build_optimizer


def epoch_seconds(
    args: argparse.Namespace,
    data: PreparedData,
    accumulation: int,
    splits: int,
    measure: bool,
    every: bool = False,
) -> float:
    """One epoch's training seconds: `splits` steps measured (as a trial draws them), none
    (`measure` False), or with `every`, each accumulated step."""
    settings = TrainSettings(model=args.model, batch_size=args.batch_size, lr=0.01)
    torch.manual_seed(0)
    model = build_model(settings.model, data.num_classes, data.image_size)
    optimizer = build_optimizer(settings, model.parameters())
    split = HostSplit(torch.from_numpy(data.train.images), torch.from_numpy(data.train.labels))
    schedule = EpochSchedule(batch_size=args.batch_size, accumulation_steps=accumulation, lr=0.01,
                     growths=0)  # fmt: skip
    normalise = Normaliser.from_stats(data.mean, data.std, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    steps = EpochSteps.drawn(len(split), schedule, generator, splits if measure else 0)
    if not measure:  # every step trained as planned and none measured, accumulated ones too
        steps = EpochSteps(steps.batches)
    elif every:  # every step of two micro-batches or more
        measured = {step for step, group in enumerate(steps.batches) if len(group) > 1}
        steps = EpochSteps(steps.batches, frozenset(measured))
    noise = NoiseMeter(model) if steps.measured else None
    result = train_epoch(model, optimizer, split, normalise, steps,
                         precision=precision_for(args.amp, "bfloat16", torch.device("cpu")),
                         generator=generator,
                         noise=noise)  # fmt: skip
    if measure:
        assert result.noise.steps > 0, "nothing was measured"
    return result.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--accumulation", type=int, default=4)
    parser.add_argument("--splits", type=int, default=DEFAULT_NOISE_SPLITS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--amp", action="store_true", help="bf16 autocast")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    accumulated = args.accumulation
    cases = {
        f"no accumulation, {args.splits} steps split": (1, args.splits, True),
        "no accumulation, not measured": (1, 0, False),
        f"accumulation {accumulated}, every step measured": (accumulated, 0, True, True),
        f"accumulation {accumulated}, not measured": (accumulated, 0, False),
        f"accumulation {accumulated}, a trial's steps measured": (accumulated, 0, True),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    data = prepare_data(DataSettings(image_size=args.image_size, train_per_class=600,
                                     val_per_class=8, test_per_class=8))  # fmt: skip
    epoch_seconds(args, data, 1, 0, False)  # warm-up: first-touch costs fall on neither side
    for _ in range(args.repeats):
        for name, case in cases.items():
            times[name].append(epoch_seconds(args, data, *case))
    print(
        f"{args.model}, {args.image_size} px, 1,200 images, batch {args.batch_size}, "
        f"{'bf16 autocast' if args.amp else 'float32'}, {args.threads} thread(s), median "
        f"training seconds of {args.repeats} epochs each"
    )
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"  {name:45s} {value:7.3f} s")
    names = list(medians)
    print(f"ratio measured / not, no accumulation: {medians[names[0]] / medians[names[1]]:.3f}")
    print(f"ratio measured / not, accumulation:    {medians[names[2]] / medians[names[3]]:.3f}")
    print(f"ratio a trial's steps measured / not:  {medians[names[4]] / medians[names[3]]:.3f}")


if __name__ == "__main__":
    main()
