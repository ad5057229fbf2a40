"""Optimizers by name, one table: how each is built, its customary learning rate, and the
state it keeps per parameter (the memory model counts it before the first step).

Adding an optimizer is one entry here (plus its tests); settings, the search space, the
memory rule and the reports read this table. Torch loads only when one is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass(frozen=True)
class OptimizerKind:
    default_lr: float  # Keras' and the seed study's defaults
    state_buffers: Callable[[float], int]  # tensors the size of a parameter, given momentum
    # (parameters, lr, momentum, weight_decay, fused=): fused, one kernel for every parameter
    build: Callable[..., torch.optim.Optimizer]
    uses_momentum: bool = False  # reads the `momentum` setting


def _sgd(nesterov: bool) -> Callable[..., torch.optim.Optimizer]:
    def build(
        parameters: Iterable[nn.Parameter],
        lr: float,
        momentum: float,
        weight_decay: float,
        fused: bool = False,
    ) -> torch.optim.Optimizer:
        import torch

        return torch.optim.SGD(
            parameters, lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov,
            fused=fused or None,
        )  # fmt: skip

    return build


def _adam(decoupled: bool) -> Callable[..., torch.optim.Optimizer]:
    def build(
        parameters: Iterable[nn.Parameter],
        lr: float,
        momentum: float,
        weight_decay: float,
        fused: bool = False,
    ) -> torch.optim.Optimizer:
        import torch

        kind = torch.optim.AdamW if decoupled else torch.optim.Adam
        return kind(parameters, lr=lr, weight_decay=weight_decay, fused=fused or None)

    return build


OPTIMIZERS: dict[str, OptimizerKind] = {
    "sgd": OptimizerKind(0.01, lambda momentum: int(momentum > 0), _sgd(False), True),
    "sgd_nesterov": OptimizerKind(0.01, lambda momentum: 1, _sgd(True), True),
    "adam": OptimizerKind(0.001, lambda momentum: 2, _adam(False)),  # weight decay: L2
    "adamw": OptimizerKind(0.001, lambda momentum: 2, _adam(True)),  # decoupled decay
}
