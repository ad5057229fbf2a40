"""Factories as a user writes them, imported by name ("tests.trainables.user_models:tiny")."""

from __future__ import annotations

import time

from torch import nn


class TinyBlock(nn.Module):
    """A residual conv block: the kind of repeated block checkpointing looks for."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x):
        return x + self.norm(self.conv(x)).relu()


class TinyNet(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.body = nn.ModuleList([TinyBlock(8) for _ in range(3)])
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        x = self.stem(x)
        for block in self.body:
            x = block(x)
        return self.head(x.mean(dim=(2, 3)))


def tiny(*, num_classes: int, image_size: int) -> nn.Module:
    return TinyNet(num_classes)


def needs_32_px(*, num_classes: int, image_size: int) -> nn.Module:
    """Pools 32x down with fixed windows: images under 32 px leave nothing to pool."""
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.MaxPool2d(32), nn.Flatten(), nn.Linear(4, num_classes)
    )


def not_a_module(*, num_classes: int, image_size: int) -> dict:
    return {"layers": 3}


def wrong_outputs(*, num_classes: int, image_size: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size * image_size, num_classes + 1))


NOT_CALLABLE = 42


class NoMetaKernel(nn.Module):
    """A forward the meta device cannot run (`.item()` reads a value), as some users' do."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.head = nn.Linear(3, num_classes)

    def forward(self, x):
        scale = float(x.abs().max().item()) + 1.0
        return self.head(x.mean(dim=(2, 3)) / scale)


def reads_values(*, num_classes: int, image_size: int) -> nn.Module:
    return NoMetaKernel(num_classes)


def from_host_generator(*, num_classes: int, image_size: int) -> nn.Module:
    """Initialises its head from a host generator of its own, as some users' do: built
    under another device, `randn` would refuse the host generator."""
    import torch

    head = nn.Linear(3, num_classes)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator))
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), head)


class Sleeps(nn.Module):
    """A tiny classifier whose forward also sleeps: a step with a known cost."""

    def __init__(self, num_classes: int, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.head = nn.Linear(3, num_classes)

    def forward(self, x):
        time.sleep(self.seconds)
        return self.head(x.mean(dim=(2, 3)))


def sleeps_50ms(*, num_classes: int, image_size: int) -> nn.Module:
    return Sleeps(num_classes, 0.050)


def sleeps_100ms(*, num_classes: int, image_size: int) -> nn.Module:
    return Sleeps(num_classes, 0.100)


THREADS_SEEN: list[int] = []  # torch's thread count at each forward of `counts_threads`


class CountsThreads(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.head = nn.Linear(3, num_classes)

    def forward(self, x):
        import torch

        THREADS_SEEN.append(torch.get_num_threads())
        return self.head(x.mean(dim=(2, 3)))


def counts_threads(*, num_classes: int, image_size: int) -> nn.Module:
    return CountsThreads(num_classes)


MEMBERS_SEEN: list[str] = []  # this process's entry in its CPU gate at each forward


class SeesGateMembers(nn.Module):
    """Reads, as it trains, what this process registered with its node's CPU gate."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.head = nn.Linear(3, num_classes)

    def forward(self, x):
        import os

        from trainables.device_gate import gate_of

        members = gate_of("cpu")._members / str(os.getpid())
        MEMBERS_SEEN.append(members.read_text() if members.exists() else "")
        return self.head(x.mean(dim=(2, 3)))


def sees_gate_members(*, num_classes: int, image_size: int) -> nn.Module:
    return SeesGateMembers(num_classes)


class SleepsUnderAutocast(nn.Module):
    """A tiny classifier whose forward sleeps only with CPU autocast on (`under`), or only
    with it off: a model on which bf16 trains slower, or faster, than float32 by a known
    amount, whatever this machine's CPU does with bf16."""

    def __init__(self, num_classes: int, under: bool) -> None:
        super().__init__()
        self.under = under
        self.head = nn.Linear(3, num_classes)

    def forward(self, x):
        import torch

        if torch.is_autocast_enabled("cpu") == self.under:
            time.sleep(0.040)
        return self.head(x.mean(dim=(2, 3)))


def slow_under_autocast(*, num_classes: int, image_size: int) -> nn.Module:
    return SleepsUnderAutocast(num_classes, under=True)


def slow_without_autocast(*, num_classes: int, image_size: int) -> nn.Module:
    return SleepsUnderAutocast(num_classes, under=False)


# What each build of `reads_values_while_built` filled in: ones asked of `torch.nn.init` and of
# a tensor's own `normal_`, or the zeros that were there where the filling was skipped.
INITIALISED_SUMS: list[float] = []


def reads_values_while_built(*, num_classes: int, image_size: int) -> nn.Module:
    """Reads a tensor's values while building (as RegNet's builder computes its widths)."""
    import torch

    (width,) = (torch.arange(1) + 4).tolist()
    by_name = nn.init.normal_(torch.zeros(width), mean=1.0, std=0.0)
    by_method = torch.zeros(width).normal_(1.0, 0.0)  # as nn.init.kaiming_normal_ fills
    INITIALISED_SUMS.append(float(by_name.sum() + by_method.sum()))
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, num_classes))
