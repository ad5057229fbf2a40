"""Every key `train_classifier` reads from its config, with its default, unit and rule.

A trainable config is a flat dict of these keys (plus a nested `data` dict); any key left
out takes the default below, and an unknown key is an error, not silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from trainables.data.settings import DataSettings
from trainables.models import ModelName

# Integers and booleans are strict: a quoted "64" in YAML is a mistake worth reporting.
# Floats stay lax because YAML 1.1 reads `1e-4` (no dot) as a string.
_INT = {"strict": True}


class TrainSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelName = "small_cnn"
    batch_size: int = Field(32, gt=0, **_INT)  # images per forward pass on the device
    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(0.01, gt=0)  # learning rate per optimizer step
    momentum: float = Field(0.9, ge=0, lt=1)  # SGD only
    weight_decay: float = Field(1e-4, ge=0)  # L2, coupled (torch's weight_decay)
    epochs: int = Field(5, gt=0, **_INT)
    seed: int = Field(0, **_INT)  # model init and data order
    target_acc: float = Field(0.75, gt=0, le=1)  # val_acc that stops the time_to_target_s clock
    train_eval_size: int = Field(400, gt=0, **_INT)  # training images scored in eval mode
    eval_batch_size: int = Field(256, gt=0, **_INT)  # images per eval forward pass
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: CUDA when there is one
    num_threads: int | None = Field(None, gt=0, **_INT)  # torch threads; None: trial's CPU share
    data: DataSettings = DataSettings()  # used when no prepared data is passed in

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TrainSettings:
        """Validate a Tune config; numpy scalars (from some searchers) become Python ones."""
        return cls.model_validate({key: _plain(value) for key, value in config.items()})


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


TRAIN_KEYS: frozenset[str] = frozenset(TrainSettings.model_fields)
