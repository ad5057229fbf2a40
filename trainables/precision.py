"""Mixed precision (AMP) as one object the training loop calls at three places, and the
update it applies: gradient clipping, where asked, sits between the GradScaler's unscaling
and the optimizer's step.

On CUDA: fp16 autocast with a GradScaler (the seed study's torch.cuda.amp), or bf16
autocast without one when the config asks and the GPU supports it. On CPU: bf16 autocast,
the only autocast dtype the CPU backend offers. Off: plain fp32.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
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
    clip_norm: float | None = None  # the gradients' global L2 norm clipped to this; None: not

    def autocast(self) -> AbstractContextManager:
        return torch.autocast(
            self.device_type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None
        )

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(
        self, optimizer: torch.optim.Optimizer, parameters: Iterable[torch.Tensor]
    ) -> torch.Tensor | None:
        """Apply the step. With a GradScaler: a 0-dim tensor on the device, true where the
        step was skipped (a gradient overflowed: the scaler leaves the weights and lowers
        its scale), found without waiting for the device (the scaler skips exactly when the
        gradients' norm is not finite). Nothing here reads a value back: with a fused
        optimizer (on CUDA) an fp16 step never waits for the device. Without a scaler,
        nothing skips: None. With `clip_norm`, the gradients are scaled down to that norm
        first (their norm as the update sees them: unscaled)."""
        if self.scaler is None:
            if self.clip_norm is not None:  # parameters without a gradient are left out
                torch.nn.utils.clip_grad_norm_(parameters, self.clip_norm)
            optimizer.step()
            return None
        with_grads = [p for p in parameters if p.grad is not None]
        if self.clip_norm is not None:
            self.scaler.unscale_(optimizer)  # the scaler's step then does not unscale again
        norm = torch.nn.utils.get_total_norm([p.grad for p in with_grads])
        overflowed = ~torch.isfinite(norm)
        if self.clip_norm is not None:  # an overflowed step is skipped whatever it is scaled by
            torch.nn.utils.clip_grads_with_norm_(with_grads, self.clip_norm, norm)
        self.scaler.step(optimizer)
        self.scaler.update()
        return overflowed

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


def precision_for(
    amp: bool, amp_dtype: AmpDtype, device: torch.device, clip_norm: float | None = None
) -> Precision:
    if not amp:
        return Precision(device.type, None, clip_norm=clip_norm)
    if device.type == "cuda":
        if amp_dtype == "bfloat16" and bf16_supported():
            return Precision("cuda", torch.bfloat16, clip_norm=clip_norm)
        if amp_dtype == "bfloat16":  # the trial's record says float16 too (`precision`)
            warnings.warn(
                "amp_dtype bfloat16 was asked for, but this card has no native bfloat16: the "
                "trial runs float16 with a GradScaler", stacklevel=2,
            )  # fmt: skip
        return Precision("cuda", torch.float16, torch.amp.GradScaler("cuda"), clip_norm)
    return Precision(device.type, torch.bfloat16, clip_norm=clip_norm)
