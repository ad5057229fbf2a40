"""Fakes shared by tests: stand-ins for what Ray hands to callbacks, and the errors a
failing step raises (out-of-memory errors as devices and libraries word them, `RaiseWhen`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeTrial:
    """The parts of a Tune `Trial` that callbacks read."""

    trial_id: str
    config: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"train_classifier_{self.trial_id}"


def schema_result(epoch: int, status: str = "ok", **values: Any) -> dict[str, Any]:
    """A result as the trainable reports it, plus Tune's bookkeeping keys."""
    return {
        "epoch": epoch,
        "val_acc": 0.5 + epoch / 10,
        "best_val_acc": 0.5 + epoch / 10,
        "throughput": 1000.0,
        "gen_gap": 0.05,
        "time_to_target_s": float("inf"),
        "status": status,
        # Tune adds these; they are not metrics of the schema
        "training_iteration": epoch,
        "time_total_s": 1.0 * epoch,
        "pid": 1234,
        "done": False,
        **values,
    }


# The messages devices and libraries raise when memory runs out (DESIGN.md lists them).
OOM_ERRORS = {
    "torch.OutOfMemoryError": lambda: __import__("torch").OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB"
    ),
    "cuda runtime": lambda: RuntimeError("CUDA error: out of memory"),
    "hip": lambda: RuntimeError("HIP out of memory. Tried to allocate 20.00 MiB"),
    "xpu": lambda: RuntimeError("XPU out of memory. Tried to allocate 1.00 GiB"),
    "mps": lambda: RuntimeError("MPS backend out of memory (MPS allocated: 1.2 GB)"),
    "cpu allocator": lambda: RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 8589934592 bytes."
    ),
    "cudnn": lambda: RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    "cudnn workspace": lambda: RuntimeError(
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED: no algorithm fits the workspace memory left"
    ),
    "cublas": lambda: RuntimeError(
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"
    ),
}


class RaiseWhen:
    """A callable that raises `error()` on its `at`-th call (1-based), else does nothing."""

    def __init__(self, error, at: int = 1) -> None:
        self.error, self.at, self.calls = error, at, 0

    def __call__(self, *args, **kwargs) -> None:
        self.calls += 1
        if self.calls == self.at:
            raise self.error()
