"""Gradient checkpointing's effect on a training step's peak memory, per model: the CPU
meter's peak with and without it, side by side, and what was recomputed.

The meter counts what a step holds at its peak (parameters, gradients, optimizer state,
the batch and what autograd saves; see `trainables.memory`), so the figures are the same on
any CPU and no training is needed. SGD with momentum, fp32.

    python bench/activation_checkpointing_memory.py [--models resnet18 mobilenet_v3_small ...]
        [--image-size 64] [--batch-size 64]
"""

from __future__ import annotations

import argparse

import torch

from trainables.activation_checkpointing import describe_checkpointing, enable_checkpointing
from trainables.memory import MIB, step_peak_bytes
from trainables.models import build_model
from trainables.precision import precision_for

MODELS = ["resnet18", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny", "small_cnn"]


def metered_peak(name: str, image_size: int, batch_size: int, checkpointing: bool) -> tuple:
    torch.manual_seed(0)
    model = build_model(name, num_classes=2, image_size=image_size).train()
    if checkpointing:
        model = enable_checkpointing(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(batch_size, 3, image_size, image_size)
    targets = torch.randint(0, 2, (batch_size,))
    cpu = precision_for(False, "float16", torch.device("cpu"))
    peak = step_peak_bytes(model, optimizer, inputs, targets, cpu)
    return peak / MIB, describe_checkpointing(model) if checkpointing else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    print(f"metered peak of one training step, {args.batch_size} images of {args.image_size} px")
    print(f"{'model':20s} {'off MiB':>9s} {'on MiB':>9s} {'on/off':>7s}  recomputed")
    for name in args.models:
        off, _ = metered_peak(name, args.image_size, args.batch_size, checkpointing=False)
        on, what = metered_peak(name, args.image_size, args.batch_size, checkpointing=True)
        print(f"{name:20s} {off:9.1f} {on:9.1f} {on / off:7.2f}  {what}")


if __name__ == "__main__":
    main()
