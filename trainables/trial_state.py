"""What a trial saves after each epoch so that it can continue exactly where it stopped:
its `TrialRecord` (not TrialState: Optuna has one) and the model, optimizer and
precision state."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainables.metrics import Progress
from trainables.precision import Precision

STATE_FILE = "trial_state.pt"  # the name checkpoints have always had

# Until 2026-11-25 models were `StagedClassifier`s: their weights' keys began `stages.N.`.
# ResNet's stages were (conv1, bn1, relu, maxpool), layer1 .. layer4, (avgpool, flatten, fc).
_RESNET_STAGES = {"0.0": "conv1", "0.1": "bn1", "1": "layer1", "2": "layer2", "3": "layer3",
                  "4": "layer4", "5.2": "fc"}  # fmt: skip


@dataclass(frozen=True)
class TrialRecord:
    """The plain-number part of a trial: where it is and what it has achieved."""

    epoch: int = 0  # last finished epoch
    progress: Progress = field(default_factory=Progress)
    last_metrics: dict[str, Any] = field(default_factory=dict)
    batch_capacity: int | None = None  # largest physical batch known to fit, once one did not
    skipped_streak: int = 0  # steps the GradScaler skipped in a row, up to the last epoch
    growths: int = 0  # times the batch grew under the noise-scale rule (interval: by epoch)
    # the evaluation ways, (batch, layout), timed so far (trainables.eval_choice), so that a
    # resumed trial scores as it chose; saved before the layout was chosen: batches alone
    eval_seconds_per_image: dict[tuple[int, str] | int, float] = field(default_factory=dict)
    compile_seconds: float = 0.0  # torch.compile so far (compile_s)
    # each configuration's timed blocks (trainables.speed.ConfigSpeed, as plain numbers)
    speeds: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "progress": asdict(self.progress)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrialRecord:
        return cls(**{**values, "progress": Progress(**values["progress"])})


def save_trial_state(
    directory: Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    state: TrialRecord,
    best_weights: dict[str, torch.Tensor] | None = None,
) -> Path:
    """`best_weights`: the best-val epoch's, while its gaps wait to be scored."""
    path = directory / STATE_FILE
    saved = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "precision": precision.state_dict(),  # the GradScaler's scale and growth tracker
        "state": state.to_dict(),
    }
    if best_weights is not None:
        saved["best_model"] = best_weights
    torch.save(saved, path)
    return path


def renamed_from_staged(weights: dict[str, Any], model: str) -> dict[str, Any]:
    """Model weights a trial saved before models were plain modules, under today's keys,
    so that a search started then resumes; newer weights come back as they are."""
    if not any(key.startswith("stages.") for key in weights):
        return weights
    renamed = {}
    for key, value in weights.items():
        rest = key.removeprefix("stages.")
        if model.startswith("resnet"):
            old = next((old for old in _RESNET_STAGES if rest.startswith(f"{old}.")), None)
            if old is not None:
                rest = _RESNET_STAGES[old] + rest[len(old) :]
        renamed[rest] = value
    return renamed


def load_trial_state(directory: Path) -> dict[str, Any]:
    # weights_only: a checkpoint is data, never code to run.
    return torch.load(directory / STATE_FILE, map_location="cpu", weights_only=True)
