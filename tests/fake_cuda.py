"""A CUDA card faked at `torch.cuda`: the project's own CUDA code runs on a CPU.

Exactly the functions `trainables.cuda.CUDA_CALLS` and `NVML_CALLS` list are replaced, and
`trainables.cuda.load_kernels`, the one part that launches kernels. Every device argument is
checked with torch's own validator, strictly (`_get_device_index(device, optional=False)`),
even where the installed torch accepts `torch.device("cuda")` and means the current device:
a real card refuses that in `set_per_process_memory_fraction`, so code that passes a device
without its index fails here wherever it does so. Other arguments are checked as torch
checks them (the memory fraction must be a float in [0, 1]).

The answers are a card's figures (`FakeCard`): its size, what neighbours and this process's
context hold, and an allocator with reserved 2 MiB blocks, a cache, peaks and a memory
fraction that it enforces. Tensors stay on the CPU; a model's `CardLoad` stage makes each
training forward take its memory on the card (`FakeCard.hold`), so a step that needs more
than the trial's limit raises CUDA's own out-of-memory error, with CUDA's message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn
from torch.cuda._utils import _get_device_index

import trainables.cuda as project_cuda

GIB = 1 << 30
MIB = 1 << 20
BLOCK = 2 * MIB  # the caching allocator reserves large blocks in multiples of this
DRIVER = "580.65.06"


def _blocks(nbytes: int) -> int:
    return -(-nbytes // BLOCK) * BLOCK


@dataclass
class FakeCard:
    """One card: what CUDA and NVML would say of it, and an allocator that keeps to its
    memory fraction as PyTorch's caching allocator does (a request over the limit first
    gives the cache back, then raises)."""

    name: str = "Fake H100"
    total: int = 80 * GIB
    major: int = 9  # compute capability: 8 and later compute in bfloat16
    uuid: str = "00000000-fake-card-0000-000000000000"
    neighbours: int = 0  # other processes on the card
    context: int = 500 * MIB  # this process's, outside the allocator, once kernels load
    # what the context grows by at the first real step (the model's own kernels load then)
    context_growth: int = 0
    stepped: bool = False
    nvml_sees_process: bool = True  # False: NVML lists no process (a container's PID space)
    other_programs: int = 0  # processes on the card that are no trials of the search
    kernels_loaded: int = 0  # times `load_kernels` ran
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    fraction: float | None = None
    fractions: list[float] = field(default_factory=list)  # every limit set, in order
    refusals: int = 0  # requests the allocator refused (torch counts them as num_ooms)

    @property
    def outside(self) -> int:
        if not self.kernels_loaded:
            return 0
        return self.context + (self.context_growth if self.stepped else 0)

    def free(self) -> int:
        return self.total - self.neighbours - self.outside - self.reserved

    def _may_reserve(self, more: int) -> bool:
        limit = self.total if self.fraction is None else int(self.fraction * self.total)
        return self.reserved + more <= limit and more <= self.free()

    def allocate(self, nbytes: int) -> None:
        needed = self.allocated + nbytes
        if needed > self.reserved:
            more = _blocks(needed - self.reserved)
            if not self._may_reserve(more):
                self.reserved = _blocks(self.allocated)  # the cache goes back, then a retry
                more = _blocks(needed - self.reserved)
                if not self._may_reserve(more):
                    self.refusals += 1
                    raise torch.OutOfMemoryError(self._oom_message(nbytes))
            self.reserved += more
        self.allocated = needed
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def release(self, nbytes: int) -> None:
        self.allocated = max(0, self.allocated - nbytes)

    def hold(self, nbytes: int) -> None:
        """A step's transient memory: taken (or out of memory), then given back."""
        self.stepped = True
        self.allocate(nbytes)
        self.release(nbytes)

    def _oom_message(self, nbytes: int) -> str:
        return (
            f"CUDA out of memory. Tried to allocate {nbytes / MIB:.2f} MiB. GPU 0 has a total "
            f"capacity of {self.total / GIB:.2f} GiB of which {self.free() / MIB:.2f} MiB is "
            f"free. Process {os.getpid()} has {(self.outside + self.reserved) / GIB:.2f} GiB "
            f"memory in use. Of the allocated memory {self.allocated / GIB:.2f} GiB is "
            "allocated by PyTorch"
        )


class FakeCuda:
    """`torch.cuda` (the project's calls) over `cards`; `calls` records each call's name."""

    def __init__(self, cards: list[FakeCard]) -> None:
        self.cards = cards
        self.current = 0
        self.calls: list[str] = []

    def card(self, device: Any) -> FakeCard:
        index = _get_device_index(device, optional=False)
        if not 0 <= index < len(self.cards):
            raise RuntimeError("CUDA error: invalid device ordinal")
        return self.cards[index]

    # --- torch.cuda ----------------------------------------------------------------------

    def is_available(self) -> bool:
        self.calls.append("is_available")
        return True

    def device_count(self) -> int:
        self.calls.append("device_count")
        return len(self.cards)

    def current_device(self) -> int:
        self.calls.append("current_device")
        return self.current

    def set_device(self, device: Any) -> None:
        self.calls.append("set_device")
        self.card(device)
        self.current = _get_device_index(device, optional=False)

    def get_device_properties(self, device: Any) -> SimpleNamespace:
        self.calls.append("get_device_properties")
        card = self.card(device)
        return SimpleNamespace(name=card.name, total_memory=card.total, uuid=card.uuid,
                               major=card.major, minor=0, multi_processor_count=132)  # fmt: skip

    def mem_get_info(self, device: Any) -> tuple[int, int]:
        self.calls.append("mem_get_info")
        card = self.card(device)
        return card.free(), card.total

    def memory_reserved(self, device: Any) -> int:
        self.calls.append("memory_reserved")
        return self.card(device).reserved

    def max_memory_allocated(self, device: Any) -> int:
        self.calls.append("max_memory_allocated")
        return self.card(device).peak_allocated

    def max_memory_reserved(self, device: Any) -> int:
        self.calls.append("max_memory_reserved")
        return self.card(device).peak_reserved

    def reset_peak_memory_stats(self, device: Any) -> None:
        self.calls.append("reset_peak_memory_stats")
        card = self.card(device)
        card.peak_allocated, card.peak_reserved = card.allocated, card.reserved

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        """torch's allocator statistics, those the project reads."""
        self.calls.append("memory_stats")
        card = self.card(self.current if device is None else device)
        return {"num_ooms": card.refusals, "reserved_bytes.all.current": card.reserved}

    def set_per_process_memory_fraction(self, fraction: Any, device: Any) -> None:
        self.calls.append("set_per_process_memory_fraction")
        card = self.card(device)
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if fraction < 0 or fraction > 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        card.fraction = fraction
        card.fractions.append(fraction)

    def synchronize(self, device: Any) -> None:
        self.calls.append("synchronize")
        self.card(device)

    def empty_cache(self) -> None:
        """Every card's cache, as PyTorch's allocator empties them all."""
        self.calls.append("empty_cache")
        for card in self.cards:
            card.reserved = _blocks(card.allocated)

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        self.calls.append("is_bf16_supported")
        return self.cards[self.current].major >= 8

    # --- what launches kernels, and NVML ------------------------------------------------------

    def load_kernels(self, device: torch.device) -> None:
        self.calls.append("load_kernels")
        self.card(device).kernels_loaded += 1

    def nvml(self) -> dict[str, Any]:
        def handle_by_uuid(uuid: bytes) -> FakeCard:
            for card in self.cards:
                if uuid == f"GPU-{card.uuid}".encode():
                    return card
            raise RuntimeError(f"NVML: no card with UUID {uuid!r}")

        def running_processes(card: FakeCard) -> list[SimpleNamespace]:
            if not card.nvml_sees_process:
                return []
            others = [SimpleNamespace(pid=4_000_000 + i, usedGpuMemory=GIB)
                      for i in range(card.other_programs)]  # fmt: skip
            return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=card.outside + card.reserved),
                    *others]  # fmt: skip

        return {
            "nvmlInit": lambda: None,
            "nvmlDeviceGetHandleByUUID": handle_by_uuid,
            "nvmlDeviceGetComputeRunningProcesses": running_processes,
            "nvmlSystemGetDriverVersion": lambda: DRIVER,
        }

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
        import pynvml

        for name in project_cuda.CUDA_CALLS:
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        for name, fake in self.nvml().items():
            monkeypatch.setattr(pynvml, name, fake)
        monkeypatch.setattr(project_cuda, "load_kernels", self.load_kernels)
        # A new process as far as the project knows: nothing measured on a card yet.
        monkeypatch.setattr(project_cuda, "_outside_allocator", {})
        return self


class CardLoad(nn.Module):
    """A stage whose training forward takes `fixed + per_image * batch` bytes on `card` for
    the step (ResNet-like: a fixed part and activations per image): what a real model's
    step would allocate on the card, while its tensors stay on the CPU. `in_eval`: bytes
    per image an evaluation forward takes."""

    def __init__(self, card: FakeCard, per_image: int, fixed: int = 0, in_eval: int = 0) -> None:
        super().__init__()
        self.card, self.per_image, self.fixed, self.in_eval = card, per_image, fixed, in_eval
        self.batches: list[int] = []  # the batch of each training forward, in order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            self.batches.append(len(x))
            self.card.hold(self.fixed + self.per_image * len(x))
        elif not self.training:
            self.card.hold(self.fixed + self.in_eval * len(x))
        return x


CUDNN_NO_ENGINE = "cuDNN error: FIND was unable to find an engine to execute this computation"


class CudnnPlanSearch(nn.Module):
    """A convolution as cuDNN v8 runs it (aten/src/ATen/native/cudnn/Conv_v8.cpp): each plan
    asks for its workspace (`workspaces`, bytes per image, largest first), a plan whose
    workspace the allocator refuses is skipped with its error swallowed, and when none is
    left the step fails with cuDNN's own words, which do not say memory. `runnable`: False
    for a shape no plan can run, memory or not."""

    def __init__(self, card: FakeCard, workspaces: list[int], runnable: bool = True) -> None:
        super().__init__()
        self.card, self.workspaces, self.runnable = card, workspaces, runnable

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            if not self.runnable:
                raise RuntimeError(CUDNN_NO_ENGINE)
            for per_image in self.workspaces:
                try:
                    self.card.hold(per_image * len(x))
                    return x
                except torch.OutOfMemoryError:
                    continue  # the next plan
            raise RuntimeError(CUDNN_NO_ENGINE)
        return x
