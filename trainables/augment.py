"""Data augmentation on uint8 image tensors, on the device: random crop with padding and
horizontal flip, the standard small-image augmentation. No PIL in the hot loop."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def crop_padding(image_size: int) -> int:
    """Padding of the random crop: 4 px at 32 px, scaled with the image (1/8 of its side)."""
    return max(1, image_size // 8)


def random_crop_flip(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Each image shifted by up to `crop_padding` px (zero-padded) and flipped with p=0.5.

    Random numbers come from `generator` (on the CPU), so an epoch's augmentation is
    fixed by its seed, and a resumed trial sees the same images.
    """
    count, _, height, width = images.shape
    pad = crop_padding(height)
    device = images.device
    flips, top, left = _draws_on(device, count, pad, generator)
    padded = F.pad(images, (pad, pad, pad, pad))
    rows = (top[:, None] + torch.arange(height, device=device))[:, None, :, None]
    cols = (left[:, None] + torch.arange(width, device=device))[:, None, None, :]
    batch = torch.arange(count, device=device)[:, None, None, None]
    channels = torch.arange(images.shape[1], device=device)[None, :, None, None]
    cropped = padded[batch, channels, rows, cols]
    return torch.where(flips[:, None, None, None], cropped.flip(-1), cropped)


def _draws_on(
    device: torch.device, count: int, pad: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each image's flip, top and left offset, drawn on the host (in this order: the epoch's
    augmentation is its seed's) and sent to `device` in one copy. For a card they are drawn
    into page-locked memory and copied without blocking: a copy from pageable memory waits
    for every kernel queued before it, at every micro-batch."""
    on_card = device.type == "cuda"
    draws = torch.empty((3, count), dtype=torch.int64, pin_memory=on_card)
    draws[0] = torch.rand(count, generator=generator) < 0.5
    draws[1] = torch.randint(0, 2 * pad + 1, (count,), generator=generator)
    draws[2] = torch.randint(0, 2 * pad + 1, (count,), generator=generator)
    sent = draws.to(device, non_blocking=on_card)
    return sent[0].bool(), sent[1], sent[2]
