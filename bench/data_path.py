"""The data path on real image files, measured side by side in one run; prints ratios.

On a generated PetImages-style folder (2 x 1000 JPEGs of synthetic cats and dogs stretched
to photo-like sizes, 250-500 px a side, as the Kaggle photos are):

1. Decode once: `prepare_data` with an empty cache (list, decode, resize, write the cache,
   split). Seconds and images/s. Beside it, the decoding alone in one process and in a
   2-process pool, to show whether a pool would pay off on this machine.
2. Per-trial start-up with the cache: `prepare_data` again (list and stat the folder,
   hash, map the cache, gather the splits, channel stats), and its ratio to decoding.
   The synthetic source at the same counts is printed for reference: drawing images is
   what every search paid before.
3. Data share of an epoch: the trainable's training part of one epoch (`fit_classifier`'s
   `epoch_time_s`) against the same epoch's data work alone: the shuffle, the index
   gathers of images and labels per batch, and the uint8 -> float normalisation, done by
   the same objects `train_epoch` uses, with no model. Their ratio is the share of the
   epoch spent on data. The trainable keeps the splits as tensors, so this share does
   not depend on the cache: the cache decides start-up, not epochs.

    python bench/data_path.py [--per-class 1000] [--image-size 64] [--batch-size 64]
        [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

from trainables.classifier import fit_classifier
from trainables.data import DataSettings, PreparedData, prepare_data
from trainables.data.decode import decode_image
from trainables.data.example_folders import write_pet_folder
from trainables.data.folder import list_image_folder
from trainables.settings import TrainSettings
from trainables.training import batch_slices, device_batches
from trainables.trial import TrialData


def timed(function, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


def decode_serial(paths: list[Path], size: int) -> int:
    return sum(decode_image(path, size).pixels is not None for path in paths)


def decode_pool(paths: list[Path], size: int, workers: int = 2) -> int:
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        decoded = pool.map(decode_image, paths, [size] * len(paths), chunksize=64)
        return sum(item.pixels is not None for item in decoded)


def trainable_epoch(settings: TrainSettings, data: PreparedData) -> float:
    return fit_classifier(settings, data, lambda *_: None)["epoch_time_s"]


def data_only_epoch(settings: TrainSettings, data: PreparedData) -> float:
    """The data work of `train_epoch` for one epoch: what remains with the model taken out."""
    cpu = torch.device("cpu")
    splits = TrialData.of(data, cpu, settings)
    generator = torch.Generator().manual_seed(settings.seed)
    started = time.perf_counter()
    order = torch.randperm(len(splits.train), generator=generator)
    batches = (order[batch] for batch in batch_slices(len(splits.train), settings.batch_size))
    for pixels, _targets in device_batches(splits.train, batches, cpu):
        splits.normalise(pixels)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--per-class", type=int, default=1000, help="JPEGs generated per class")
    parser.add_argument("--image-size", type=int, default=64, help="px, square")
    parser.add_argument("--batch-size", type=int, default=64, help="images per training step")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timings per measurement (the median is printed)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    median = statistics.median

    with tempfile.TemporaryDirectory(prefix="bench-data-path-") as scratch:
        root = Path(scratch) / "PetImages"
        write_seconds, _ = timed(
            lambda: write_pet_folder(root, per_class=args.per_class, photo_sizes=(250, 500))
        )
        settings = DataSettings(
            source="image_folder",
            root=str(root),
            cache_dir=f"{scratch}/cache-0",
            image_size=args.image_size,
            train_per_class="all",
            val_per_class=100,
            test_per_class=100,
        )
        catalogue = list_image_folder(root)
        files = len(catalogue.files)
        paths = [catalogue.absolute(file) for file in catalogue.files]

        cold = []
        for repeat in range(args.repeats):  # each into an empty cache of its own
            empty = settings.model_copy(update={"cache_dir": f"{scratch}/cache-{repeat}"})
            seconds, data = timed(prepare_data, empty)
            cold.append(seconds)
        decode_seconds = median(cold)
        serial = [timed(decode_serial, paths, args.image_size)[0] for _ in range(args.repeats)]
        pooled = [timed(decode_pool, paths, args.image_size)[0] for _ in range(args.repeats)]
        startup = [timed(prepare_data, settings)[0] for _ in range(max(args.repeats, 5))]
        synthetic = DataSettings(
            image_size=args.image_size,
            train_per_class=args.per_class - 200,
            val_per_class=100,
            test_per_class=100,
        )
        synthetic_seconds, _ = timed(prepare_data, synthetic)

        train = TrainSettings(batch_size=args.batch_size, epochs=1, device="cpu")
        trainable_epoch(train, data)  # warm-up: allocator, kernels
        epochs, data_parts = [], []
        for _ in range(args.repeats):  # alternating, so drift in the machine falls on both
            epochs.append(trainable_epoch(train, data))
            data_parts.append(data_only_epoch(train, data))

    print(
        f"{files} JPEGs (250-500 px a side, written in {write_seconds:.1f} s) at "
        f"{args.image_size} px; {args.threads} torch thread(s); medians of {args.repeats}+"
    )
    print("1. decode once")
    print(
        f"  prepare_data, empty cache:       {decode_seconds:7.2f} s  "
        f"({files / decode_seconds:.0f} images/s)"
    )
    print(f"  decoding alone, 1 process:       {median(serial):7.2f} s")
    print(
        f"  decoding alone, 2-process pool:  {median(pooled):7.2f} s  "
        f"(ratio pool / 1 process: {median(pooled) / median(serial):.2f})"
    )
    print("2. per-trial start-up")
    print(
        f"  prepare_data, cache exists:      {median(startup):7.3f} s  "
        f"(ratio to decoding: {median(startup) / decode_seconds:.3f}, "
        f"{decode_seconds / median(startup):.0f}x faster)"
    )
    print(
        f"  synthetic, same counts:          {synthetic_seconds:7.2f} s  "
        f"(ratio cached folder / synthetic: {median(startup) / synthetic_seconds:.3f})"
    )
    print(f"3. one epoch of {len(data.train)} training images, batch {args.batch_size}")
    print(f"  trainable, training part:        {median(epochs):7.3f} s")
    print(f"  its data work alone:             {median(data_parts):7.3f} s")
    print(f"  data share of the epoch:         {median(data_parts) / median(epochs):7.1%}")


if __name__ == "__main__":
    main()
