"""Mixed precision (AMP) as one object the training loop calls at three places.

On CUDA: fp16 autocast with a GradScaler (the seed study's torch.cuda.amp), or bf16
autocast without one when the config asks and the GPU supports it. On CPU: bf16 autocast,
the only autocast dtype the CPU backend offers. Off: plain fp32.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from trainables.cuda import bf16_supported
from trainables.settings import AmpDtype


@dataclass
class Precision:
    device_type: str
    dtype: torch.dtype | None  # None: fp32, no autocast
    scaler: torch.amp.GradScaler | None = None  # fp16 only: keeps small gradients alive

    def autocast(self) -> AbstractContextManager:
        return torch.autocast(
            self.device_type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None
        )

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Apply the step; False when the GradScaler skipped it (the gradients overflowed).

        The scaler lowers its scale exactly when it skips, so comparing the scale is the
        public way to tell. Reading the scale after `update` waits for the step's kernels:
        one synchronisation per fp16 step (the scaler's own step already waits once).
        """
        if self.scaler is None:
            optimizer.step()
            return True
        scale = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        return self.scaler.get_scale() >= scale

    def loss_scale(self) -> float:
        """What the loss is multiplied by before backward (so the gradients are too)."""
        return self.scaler.get_scale() if self.scaler else 1.0

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict() if self.scaler else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler and state:
            self.scaler.load_state_dict(state)

    @property
    def name(self) -> str:
        return "fp32" if self.dtype is None else str(self.dtype).removeprefix("torch.")


def precision_for(amp: bool, amp_dtype: AmpDtype, device: torch.device) -> Precision:
    if not amp:
        return Precision(device.type, None)
    if device.type == "cuda":
        if amp_dtype == "bfloat16" and bf16_supported():
            return Precision("cuda", torch.bfloat16)
        return Precision("cuda", torch.float16, torch.amp.GradScaler("cuda"))
    return Precision(device.type, torch.bfloat16)
