import torch

from trainables.augment import crop_padding, random_crop_flip


def images(count: int = 16, size: int = 32) -> torch.Tensor:
    return torch.randint(
        0, 256, (count, 3, size, size), generator=torch.Generator().manual_seed(1)
    ).to(torch.uint8)


def test_augmented_images_keep_shape_and_dtype_and_the_same_seed_gives_the_same_images():
    batch = images()
    first = random_crop_flip(batch, torch.Generator().manual_seed(0))
    again = random_crop_flip(batch, torch.Generator().manual_seed(0))
    other = random_crop_flip(batch, torch.Generator().manual_seed(1))
    assert first.shape == batch.shape and first.dtype == torch.uint8
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_each_image_is_a_shifted_and_possibly_flipped_copy_of_itself():
    batch = images(count=32)
    out = random_crop_flip(batch, torch.Generator().manual_seed(0))
    pad = crop_padding(32)
    for original, augmented in zip(batch, out, strict=True):
        padded = torch.nn.functional.pad(original, (pad, pad, pad, pad))
        candidates = [
            view
            for top in range(2 * pad + 1)
            for left in range(2 * pad + 1)
            for crop in [padded[:, top : top + 32, left : left + 32]]
            for view in (crop, crop.flip(-1))
        ]
        assert any(torch.equal(augmented, view) for view in candidates)


def test_about_half_the_images_are_flipped_and_most_are_shifted():
    batch = torch.arange(32, dtype=torch.uint8).repeat(256, 3, 32, 1)  # columns 0..31
    out = random_crop_flip(batch, torch.Generator().manual_seed(0))
    middle_row = out[:, 0, 16, 8:24].float()
    decreasing = (middle_row[:, 1:] < middle_row[:, :-1]).all(dim=1)
    assert 0.35 < decreasing.float().mean() < 0.65
    assert (out != batch).any(dim=(1, 2, 3)).float().mean() > 0.8
