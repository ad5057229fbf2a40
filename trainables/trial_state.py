"""What a trial saves after each epoch so that it can continue exactly where it stopped."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainables.metrics import Progress

STATE_FILE = "trial_state.pt"


def save_trial_state(
    directory: Path,
    *,
    epoch: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    progress: Progress,
    last_metrics: dict[str, Any],
) -> Path:
    path = directory / STATE_FILE
    torch.save(
        {
            "epoch": epoch,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "progress": asdict(progress),
            "last_metrics": last_metrics,
        },
        path,
    )
    return path


def load_trial_state(directory: Path) -> dict[str, Any]:
    # weights_only: a checkpoint is data, never code to run.
    return torch.load(directory / STATE_FILE, map_location="cpu", weights_only=True)
