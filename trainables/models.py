"""Models by name. Each is a sequence of stages, so techniques that work per stage
(activation checkpointing) apply to every model the same way.

Checkpointing does not suit models with dropout (the recomputed forward would draw other
masks); none of these has dropout."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torchvision.models import resnet18, resnet50

from trainables.settings import ModelName


class StagedClassifier(nn.Module):
    """Runs `stages` in order, optionally with activation checkpointing over segments."""

    def __init__(self, stages: list[nn.Module]) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.checkpoint_segments: int | None = None  # None: no activation checkpointing

    def enable_checkpointing(self, segments: int | None = None) -> None:
        """Checkpoint every segment but the last; `None` makes each stage a segment."""
        self.checkpoint_segments = min(segments or len(self.stages), len(self.stages))

    def segments(self) -> list[nn.Sequential]:
        """The stages grouped into `checkpoint_segments` runs of (nearly) equal length.

        The groups share the stages' modules; they are views, not extra parameters.
        """
        count = self.checkpoint_segments or 1
        bounds = [round(i * len(self.stages) / count) for i in range(count + 1)]
        return [nn.Sequential(*self.stages[start:end]) for start, end in itertools.pairwise(bounds)]

    @property
    def checkpointing(self) -> bool:
        return self.checkpoint_segments is not None and self.training and torch.is_grad_enabled()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.checkpointing:
            for stage in self.stages:
                x = stage(x)
            return x
        *recomputed, last = self.segments()
        for segment in recomputed:
            # Only the segment's input is kept; its activations are recomputed in backward.
            # Non-reentrant: works with autocast and inputs that need no gradient.
            x = checkpoint(segment, x, use_reentrant=False)
        return last(x)


def small_cnn(num_classes: int, image_size: int) -> StagedClassifier:
    """The seed study's model: conv 32 3x3 + ReLU + 2x2 max-pool, dense 128, classes."""
    conv = nn.Conv2d(3, 32, kernel_size=3, padding=1)
    dense = nn.Linear(32 * (image_size // 2) ** 2, 128)
    # He-uniform, as the seed's Keras model (kernel_initializer='he_uniform').
    for layer in (conv, dense):
        nn.init.kaiming_uniform_(layer.weight, nonlinearity="relu")
        nn.init.zeros_(layer.bias)
    return StagedClassifier(
        [
            nn.Sequential(conv, nn.ReLU(), nn.MaxPool2d(2)),
            nn.Sequential(nn.Flatten(), dense, nn.ReLU(), nn.Linear(128, num_classes)),
        ]
    )


def _staged_resnet(build: Callable[..., nn.Module], num_classes: int) -> StagedClassifier:
    net = build(weights=None, num_classes=num_classes)  # never downloads weights
    return StagedClassifier(
        [
            nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool),
            net.layer1,
            net.layer2,
            net.layer3,
            net.layer4,
            nn.Sequential(net.avgpool, nn.Flatten(), net.fc),
        ]
    )


MODELS: dict[str, Callable[[int, int], StagedClassifier]] = {
    "small_cnn": small_cnn,
    "resnet18": lambda num_classes, image_size: _staged_resnet(resnet18, num_classes),
    "resnet50": lambda num_classes, image_size: _staged_resnet(resnet50, num_classes),
}


def build_model(name: ModelName, num_classes: int, image_size: int) -> StagedClassifier:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    return MODELS[name](num_classes, image_size)
