"""Recognising an out-of-memory error in any of the forms devices raise it, and recovering.

Catch only these: an OOM ends a trial as pruned (or shrinks a growing batch), anything
else must still fail loudly.
"""

from __future__ import annotations

import gc

import torch

# Messages of the RuntimeErrors that mean "out of memory" on some device or library.
_OOM_MESSAGES = (
    "out of memory",  # CUDA, HIP, XPU: "CUDA out of memory. Tried to allocate ..."
    "mps backend out of memory",
    "defaultcpuallocator: can't allocate memory",
    "cudnn_status_not_supported",  # cuDNN gives up for lack of workspace memory
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cuda error: out of memory",
)


class MemoryBudgetExceeded(torch.OutOfMemoryError):
    """A CPU trial's metered step needs more than its `memory_budget_mb`.

    A subclass of torch's own OOM error, so it takes exactly the path a GPU's OOM takes.
    """

    def __init__(self, message: str, needed_mb: float) -> None:
        super().__init__(message)
        self.needed_mb = needed_mb


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, torch.OutOfMemoryError):  # also torch.cuda.OutOfMemoryError
        return True
    if isinstance(error, RuntimeError):
        message = str(error).lower()
        return any(pattern in message for pattern in _OOM_MESSAGES)
    return False


def release_memory() -> None:
    """Give freed memory back after an OOM. Call it outside the `except` block: the
    exception's traceback holds the failed step's tensors until the block is left."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
