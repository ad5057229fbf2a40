"""Models by name. Each is a sequence of stages, so techniques that work per stage
(activation checkpointing) apply to every model the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import nn
from torchvision.models import resnet18, resnet50

ModelName = Literal["small_cnn", "resnet18", "resnet50"]


class StagedClassifier(nn.Module):
    """Runs `stages` in order; the unit that later techniques wrap stage by stage."""

    def __init__(self, stages: list[nn.Module]) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = stage(x)
        return x


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
