"""Which images a trial trains on: the `data` section of a config."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DataSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Literal["synthetic"] = "synthetic"  # offline procedurally drawn cats vs dogs
    image_size: int = Field(64, ge=16, le=1024)  # px, square; the seed study used 200
    train_per_class: int = Field(600, gt=0)  # images per class, as in the seed study
    val_per_class: int = Field(200, gt=0)
    test_per_class: int = Field(200, gt=0)
    seed: int = 0  # which images are drawn / how the split falls
