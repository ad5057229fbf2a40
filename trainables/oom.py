"""Recognising an out-of-memory error in any of the forms devices raise it, and recovering.

Catch only these: an OOM ends a trial as pruned (or shrinks a growing batch), anything
else must still fail loudly.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch

from trainables.cuda import release_cached

# Messages of the RuntimeErrors that mean "out of memory" on some device or library.
_OOM_MESSAGES = (
    "out of memory",  # CUDA, HIP, XPU: "CUDA out of memory. Tried to allocate ..."
    "mps backend out of memory",
    "defaultcpuallocator: can't allocate memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
)
# cuDNN also says NOT_SUPPORTED for configurations it cannot run at all; only a message
# that blames memory or its workspace is an out-of-memory error.
_CUDNN_NOT_SUPPORTED = "cudnn_status_not_supported"
_MEMORY_WORDS = ("memory", "workspace")
# cuDNN v8's plan search catches each plan's out-of-memory error and, when no plan is left,
# says only this (aten/src/ATen/native/cudnn/Conv_v8.cpp): out of memory where the allocator
# refused a request meanwhile, a shape cuDNN cannot run where it did not.
_CUDNN_NO_ENGINE = "unable to find an engine to execute this computation"


class MemoryBudgetExceeded(torch.OutOfMemoryError):
    """A CPU trial's metered step needs more than its `memory_budget_mb`.

    A subclass of torch's own OOM error, so it takes exactly the path a GPU's OOM takes.
    """

    def __init__(self, message: str, needed_mb: float) -> None:
        super().__init__(message)
        self.needed_mb = needed_mb


def is_out_of_memory(
    error: BaseException, allocator_refused: Callable[[], bool] | None = None
) -> bool:
    """Whether `error` means out of memory. `allocator_refused`: whether the card's allocator
    refused a request since the step began (`MemoryBudget.allocator_refused`), which decides
    what cuDNN's "unable to find an engine" means; without it, that message is an error."""
    if isinstance(error, torch.OutOfMemoryError):  # also torch.cuda.OutOfMemoryError
        return True
    if not isinstance(error, RuntimeError):
        return False
    message = str(error).lower()
    if _CUDNN_NO_ENGINE in message:
        return allocator_refused is not None and allocator_refused()
    if _CUDNN_NOT_SUPPORTED in message:
        return any(word in message for word in _MEMORY_WORDS)
    return any(pattern in message for pattern in _OOM_MESSAGES)


def release_memory(device: torch.device) -> None:
    """Give a CUDA device's freed memory back after an OOM, so the next trial in this
    process starts clean. Call it outside the `except` block, with the trial's references
    dropped: the exception's traceback holds the failed step's tensors until the block is
    left. On CPU nothing is cached to give back (the meter refuses a step before it
    allocates), so it costs nothing there."""
    if device.type == "cuda":
        gc.collect()  # tensors in reference cycles of the failed step's frames
        release_cached(device)
