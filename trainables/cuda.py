"""Every call this project makes into `torch.cuda` and NVML, in one module.

A real card refuses what a CPU never asks: `torch.cuda.set_per_process_memory_fraction`
raises for `torch.device("cuda")` (a device without an index), though most other memory
calls accept one and mean the current device. So a CUDA device gets its index once, where
it is resolved (`resolve_device`, `indexed`: the current device, which under Ray is the one
its CUDA_VISIBLE_DEVICES leaves), and every call goes through here with it.

`CUDA_CALLS` and `NVML_CALLS` list the functions called. The suite replaces exactly these
with a fake card that checks every argument with torch's own validator, strictly
(tests/fake_cuda.py), and a test fails when any other module calls `torch.cuda`, or this one
calls a function not listed. Only `load_kernels`, which launches kernels, stays outside the
fake, and it is kept small.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any

import torch

# The torch.cuda functions this project calls (tests/fake_cuda.py fakes each one).
CUDA_CALLS: tuple[str, ...] = (
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "get_device_properties",
    "mem_get_info",
    "memory_reserved",
    "max_memory_allocated",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "memory_stats",
    "set_per_process_memory_fraction",
    "synchronize",
    "empty_cache",
    "is_bf16_supported",
)
# The NVML functions (pynvml) it calls: this process's memory on the card, the driver.
NVML_CALLS: tuple[str, ...] = (
    "nvmlInit",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlSystemGetDriverVersion",
)


def available() -> bool:
    return torch.cuda.is_available()


def indexed(device: torch.device) -> torch.device:
    """`device` with its index: a CUDA device without one is the current device."""
    if device.type != "cuda" or device.index is not None:
        return device
    return torch.device("cuda", torch.cuda.current_device())


def resolve_device(name: str) -> torch.device:
    """The device a trial trains on: `auto` is the current CUDA device where torch sees
    one, else the CPU; a CUDA device always comes back with its index, and is made the
    current one (what `torch.cuda` calls without a device, such as `empty_cache` and the
    bf16 check, act on)."""
    if name == "auto":
        return indexed(torch.device("cuda")) if available() else torch.device("cpu")
    device = torch.device(name)
    if device.type != "cuda":
        return device
    if not available():
        raise RuntimeError(f"device {name!r} was asked for but torch sees no CUDA device")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise RuntimeError(
            f"device {name!r} was asked for but torch sees {count} CUDA device(s) here "
            f"(cuda:0 to cuda:{count - 1}; under Ray, the ones the trial was given)"
        )
    device = indexed(device)
    torch.cuda.set_device(device)
    return device


def device_key(device: torch.device) -> str:
    """What names a device across the node's processes, for its gate
    (`trainables.device_gate`): "cpu", or the card's UUID (its index differs between
    processes that Ray shows different cards)."""
    if device.type != "cuda":
        return device.type
    return f"cuda-{torch.cuda.get_device_properties(indexed(device)).uuid}"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a clock read after it is honest); CPU: nothing."""
    if device.type == "cuda":
        torch.cuda.synchronize(indexed(device))


def release_cached(device: torch.device) -> None:
    """Give the allocator's cached blocks back to the cards (PyTorch empties every
    device's cache at once); nothing on a CPU. After an out-of-memory error, call
    `trainables.oom.release_memory`, which collects the failed step's garbage first."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def bf16_supported() -> bool:
    """Whether the current card computes in bfloat16 natively (Ampere and later)."""
    return torch.cuda.is_bf16_supported(including_emulation=False)


def cards_without_bf16() -> list[str]:
    """The visible cards that do not compute in bfloat16 natively (compute capability below
    8, before Ampere), as `cuda:N (name)`. Reads properties only: no CUDA context is made,
    so a search's driver can ask before its trials take the cards. The same rule as
    `bf16_supported` (torch's `is_bf16_supported`), for every card, not the current one."""
    if torch.version.hip:
        return []  # ROCm cards all compute in bfloat16, as torch says
    cards = (torch.cuda.get_device_properties(index) for index in range(torch.cuda.device_count()))
    return [f"cuda:{index} ({card.name})" for index, card in enumerate(cards) if card.major < 8]


def load_kernels(device: torch.device) -> None:
    """A tiny convolution and matmul with their backward, in both float types a trial may
    use, so that the CUDA context, cuDNN and cuBLAS are loaded before what the process holds
    outside the allocator is measured. The one part of this module that launches kernels:
    the suite's fake card stands in for it."""
    for dtype in (torch.float32, torch.float16):
        conv = torch.nn.Conv2d(3, 8, 3).to(device, dtype)
        head = torch.randn(288, 2, device=device, dtype=dtype, requires_grad=True)
        inputs = torch.randn(2, 3, 8, 8, device=device, dtype=dtype)
        conv(inputs).flatten(1).matmul(head).sum().backward()
    torch.cuda.synchronize(device)


MIB = 1024 * 1024
# What a process holds on a card outside PyTorch's allocator (its CUDA context, loaded
# kernels, cuDNN/cuBLAS handles) when NVML cannot see the process (e.g. in a container
# with its own PID namespace): at most this, or what the card shows beyond the allocator
# when the trial is alone on it. On an H200 a process held about 760 MiB.
FALLBACK_OUTSIDE_ALLOCATOR_MB = 768

# Measured once per worker process and card: the context and libraries, once loaded, stay.
_outside_allocator: dict[int, int] = {}


@dataclass(frozen=True)
class TorchCudaCard:
    """A trial's card as `trainables.memory.MemoryBudget` reads and sets it. Built with
    `torch.device("cuda")` it means the current device, with its index from then on."""

    device: torch.device

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", indexed(self.device))

    def total_bytes(self) -> int:
        return int(torch.cuda.get_device_properties(self.device).total_memory)

    def free_bytes(self) -> int:
        return int(torch.cuda.mem_get_info(self.device)[0])

    def reserved_bytes(self) -> int:
        return int(torch.cuda.memory_reserved(self.device))

    def set_allocator_fraction(self, fraction: float) -> None:
        torch.cuda.set_per_process_memory_fraction(float(fraction), self.device)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak_bytes(self) -> int:
        """The allocator's peak of live tensors since `reset_peak`."""
        return int(torch.cuda.max_memory_allocated(self.device))

    def peak_reserved_bytes(self) -> int:
        """The allocator's peak of reserved memory since `reset_peak`: what its limit (the
        memory fraction) is checked against, so what decides an out-of-memory error."""
        return int(torch.cuda.max_memory_reserved(self.device))

    def release_cached(self) -> None:
        release_cached(self.device)

    def allocation_failures(self) -> int:
        """How many times the allocator has refused a request in this process: counted
        where it raises, also when a library catches the error and goes on (cuDNN's plan
        search tries each plan's workspace and hides the refusals)."""
        return int(torch.cuda.memory_stats(self.device).get("num_ooms", 0))

    def outside_allocator_bytes(self) -> int:
        """What this process holds on the card beyond PyTorch's allocator: measured once per
        process, after `load_kernels` (Ray's workers are reused for the next trial)."""
        index = self.device.index
        if index not in _outside_allocator:
            load_kernels(self.device)
            _outside_allocator[index] = self._measure_outside()
        return _outside_allocator[index]

    def _measure_outside(self) -> int:
        reserved = self.reserved_bytes()
        process = self.process_bytes()
        if process is not None:
            return max(0, process - reserved)
        beyond_allocator = self.total_bytes() - self.free_bytes() - reserved  # + neighbours
        return max(0, min(beyond_allocator, FALLBACK_OUTSIDE_ALLOCATOR_MB * MIB))

    def _running_processes(self) -> list[Any] | None:
        """The compute processes NVML lists on the card; None where NVML cannot answer."""
        try:
            import pynvml

            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(self.device).uuid)
            handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}".encode())
            return list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        except Exception:  # no NVML library, driver or permission: fall back
            return None

    def process_bytes(self) -> int | None:
        """This process's memory on the card as the driver counts it (NVML); None where
        NVML cannot see it."""
        processes = self._running_processes() or []
        used = [p.usedGpuMemory for p in processes if p.pid == os.getpid()]
        return int(used[0]) if used and used[0] is not None else None

    def processes(self) -> int | None:
        """How many compute processes are on the card, this one among them; None where NVML
        lists none (a container's own PID space hides them) or cannot answer."""
        return len(self._running_processes() or []) or None

    def describe(self) -> dict[str, str]:
        """The card and the software that drives it, for the trial's record."""
        properties = torch.cuda.get_device_properties(self.device)
        return {
            "device_name": f"{properties.name} ({properties.total_memory / MIB:.0f} MiB)",
            "driver_version": driver_version(),
            **software_versions(),
        }


def driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # no NVML: the driver is unknown here, not an error
        return "unknown"
    return version.decode() if isinstance(version, bytes) else str(version)


def software_versions(on_card: bool = True) -> dict[str, str]:
    """torch's, CUDA's and cuDNN's versions; cuDNN's only for a trial on a card: asking it
    walks the visible cards (torch checks their compute capability), which a CPU trial on a
    machine with cards must not touch."""
    on_card = on_card and torch.backends.cudnn.is_available()
    cudnn = torch.backends.cudnn.version() if on_card else None
    return {
        "torch_version": str(torch.__version__),  # a str subclass: checkpoints load plain str
        "cuda_version": str(torch.version.cuda or "none"),
        "cudnn_version": str(cudnn or "none"),
    }


def describe_device(device: torch.device) -> dict[str, str]:
    """What a trial ran on, for its MLflow run: the card (or the CPU) and the versions."""
    if device.type == "cuda":
        return TorchCudaCard(device).describe()
    processor = platform.processor() or platform.machine()
    return {
        "device_name": f"cpu ({processor}, {os.cpu_count()} cores)",
        "driver_version": "none",
        **software_versions(on_card=False),
    }
