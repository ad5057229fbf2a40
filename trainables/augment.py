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
    flips = (torch.rand(count, generator=generator) < 0.5).to(device)
    top = torch.randint(0, 2 * pad + 1, (count,), generator=generator).to(device)
    left = torch.randint(0, 2 * pad + 1, (count,), generator=generator).to(device)
    padded = F.pad(images, (pad, pad, pad, pad))
    rows = (top[:, None] + torch.arange(height, device=device))[:, None, :, None]
    cols = (left[:, None] + torch.arange(width, device=device))[:, None, None, :]
    batch = torch.arange(count, device=device)[:, None, None, None]
    channels = torch.arange(images.shape[1], device=device)[None, :, None, None]
    cropped = padded[batch, channels, rows, cols]
    return torch.where(flips[:, None, None, None], cropped.flip(-1), cropped)
