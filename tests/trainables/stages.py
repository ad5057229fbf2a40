"""A module slipped into the classifier model the trainable builds: how tests watch or break what
each batch meets inside the model."""

from __future__ import annotations

import pytest
from torch import nn

from trainables import trial


def insert_stage(monkeypatch: pytest.MonkeyPatch, stage: nn.Module, at: int) -> None:
    """Every model `build_model` returns from now on has `stage` at index `at`."""
    build = trial.build_model

    def build_with_stage(*args, **kwargs):
        model = build(*args, **kwargs)
        model.insert(at, stage)
        return model

    monkeypatch.setattr(trial, "build_model", build_with_stage)
