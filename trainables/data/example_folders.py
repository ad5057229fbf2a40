"""Example image folders: PetImages-style folders (PetImages/Cat/*.jpg, PetImages/Dog/*.jpg)
of the project's synthetic cats and dogs as JPEGs, plus every quirk real folders have
(empty, truncated and non-image files, grayscale, CMYK, transparent, PNG named .jpg,
EXIF-rotated), each in a known number, so that what reads a folder can be checked to count
every one exactly. The tests and benchmarks read such folders from disk, as a search reads
a user's; nothing here is downloaded.

    write_pet_folder(Path("PetImages"), per_class=100, quirks=Quirks())
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from trainables.data.decode import (
    CONVERTED_CMYK,
    CONVERTED_FORMAT,
    CONVERTED_GRAYSCALE,
    CONVERTED_ORIENTATION,
    CONVERTED_TRANSPARENCY,
    SKIPPED_BROKEN,
    SKIPPED_EMPTY,
    SKIPPED_NOT_AN_IMAGE,
    SKIPPED_TOO_LARGE,
    SKIPPED_UNREADABLE,
)
from trainables.data.settings import DataSettings
from trainables.data.synthetic import draw_image

_ORIENTATION_TAG = 0x0112
# Bytes that real non-image files in photo folders start with.
_NON_IMAGES = {
    "Thumbs.db": b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504),  # OLE compound file
    ".DS_Store": b"\x00\x00\x00\x01Bud1" + bytes(200),
    "notes.txt": b"my cat pictures, sorted by date\n",
}


@dataclass(frozen=True)
class Quirks:
    """How many files of each quirk to add to every class folder."""

    empty: int = 1  # zero-byte .jpg
    truncated: int = 1  # a JPEG cut off half-way
    non_image: int = 1  # Thumbs.db, .DS_Store, a text file (cycled)
    grayscale: int = 1  # L-mode JPEG
    cmyk: int = 1  # CMYK JPEG
    transparent: int = 1  # RGBA PNG, LA PNG, palette PNG with a transparent colour (cycled)
    png_as_jpg: int = 1  # PNG data named .jpg
    rotated: int = 1  # JPEG stored sideways with EXIF orientation 6 (rotate 90 clockwise)


NO_QUIRKS = Quirks(0, 0, 0, 0, 0, 0, 0, 0)


@dataclass
class PetFolder:
    root: Path
    class_names: tuple[str, ...]
    usable: dict[str, int]  # per class: files that decode (clean + converted)
    expected: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path -> reasons

    @property
    def skipped(self) -> Counter[str]:
        return Counter(reasons[0] for reasons in self.expected.values() if _is_skip(reasons))

    @property
    def converted(self) -> Counter[str]:
        return Counter(
            reason
            for reasons in self.expected.values()
            if not _is_skip(reasons)
            for reason in reasons
        )


def _is_skip(reasons: tuple[str, ...]) -> bool:
    skips = (
        SKIPPED_EMPTY,
        SKIPPED_BROKEN,
        SKIPPED_NOT_AN_IMAGE,
        SKIPPED_TOO_LARGE,
        SKIPPED_UNREADABLE,
    )
    return reasons[0] in skips


def write_pet_folder(
    root: Path,
    *,
    per_class: int = 20,
    class_names: tuple[str, ...] = ("Cat", "Dog"),
    quirks: Quirks = NO_QUIRKS,
    sizes: tuple[int, int] = (48, 96),
    photo_sizes: tuple[int, int] | None = None,
    seed: int = 0,
) -> PetFolder:
    """`per_class` clean JPEGs per class (named 0.jpg, 1.jpg, ... as in PetImages) plus
    `quirks` per class. Images are drawn square at `sizes` px (random in the range); with
    `photo_sizes`, each is then stretched to a random width and height in that range, so
    that decoding costs what it costs on real photos."""
    folder = PetFolder(root, class_names, usable={})
    rng = np.random.default_rng(seed)
    for label, name in enumerate(class_names):
        (root / name).mkdir(parents=True, exist_ok=True)

        def picture(index: int, label: int = label) -> Image.Image:
            size = int(rng.integers(sizes[0], sizes[1] + 1))
            pixels = draw_image(label % 2, size, np.random.default_rng([seed, label, index]))
            image = Image.fromarray(pixels)
            if photo_sizes is not None:
                width, height = rng.integers(photo_sizes[0], photo_sizes[1] + 1, 2)
                image = image.resize((int(width), int(height)), Image.Resampling.BILINEAR)
            return image

        for index in range(per_class):
            picture(index).save(root / name / f"{index}.jpg", quality=90)
        folder.usable[name] = per_class
        _add_quirks(folder, name, quirks, picture, start=per_class)
    return folder


def _add_quirks(folder: PetFolder, name: str, quirks: Quirks, picture, start: int) -> None:
    directory = folder.root / name
    index = start

    def expect(path: Path, *reasons: str) -> None:
        folder.expected[path.relative_to(folder.root).as_posix()] = reasons
        if not _is_skip(reasons):
            folder.usable[name] += 1

    for i in range(quirks.empty):
        (directory / f"empty_{i}.jpg").write_bytes(b"")
        expect(directory / f"empty_{i}.jpg", SKIPPED_EMPTY)
    for i in range(quirks.truncated):
        data = _jpeg_bytes(picture(index := index + 1))
        (directory / f"truncated_{i}.jpg").write_bytes(data[: len(data) // 2])
        expect(directory / f"truncated_{i}.jpg", SKIPPED_BROKEN)
    for i in range(quirks.non_image):
        base = list(_NON_IMAGES)[i % len(_NON_IMAGES)]
        path = directory / (base if i < len(_NON_IMAGES) else f"{i}_{base}")
        path.write_bytes(_NON_IMAGES[base])
        expect(path, SKIPPED_NOT_AN_IMAGE)
    for i in range(quirks.grayscale):
        picture(index := index + 1).convert("L").save(directory / f"gray_{i}.jpg")
        expect(directory / f"gray_{i}.jpg", CONVERTED_GRAYSCALE)
    for i in range(quirks.cmyk):
        picture(index := index + 1).convert("CMYK").save(directory / f"cmyk_{i}.jpg")
        expect(directory / f"cmyk_{i}.jpg", CONVERTED_CMYK)
    for i in range(quirks.transparent):
        path = directory / f"transparent_{i}.png"
        transparent_picture(picture(index := index + 1), kind=i % 3).save(path)
        expect(path, CONVERTED_TRANSPARENCY)
    for i in range(quirks.png_as_jpg):
        picture(index := index + 1).save(directory / f"png_{i}.jpg", format="PNG")
        expect(directory / f"png_{i}.jpg", CONVERTED_FORMAT)
    for i in range(quirks.rotated):
        save_sideways_with_orientation(picture(index := index + 1), directory / f"exif_{i}.jpg")
        expect(directory / f"exif_{i}.jpg", CONVERTED_ORIENTATION)


def transparent_picture(image: Image.Image, kind: int = 0) -> Image.Image:
    """The picture with its left half fully transparent: RGBA (0), LA (1), or a palette
    image with one transparent palette entry (2)."""
    alpha = Image.new("L", image.size, 255)
    alpha.paste(0, (0, 0, image.width // 2, image.height))
    if kind == 0:
        rgba = image.convert("RGBA")
        rgba.putalpha(alpha)
        return rgba
    if kind == 1:
        la = image.convert("LA")
        la.putalpha(alpha)
        return la
    palette = image.quantize(colors=255)
    colours = palette.getpalette()[: 255 * 3]
    palette.putpalette(colours + [0, 0, 0] * (255 - len(colours) // 3) + [0, 0, 0])
    palette.paste(255, (0, 0, image.width // 2, image.height))  # entry 255: transparent
    palette.info["transparency"] = 255
    return palette


def save_sideways_with_orientation(image: Image.Image, path: Path) -> None:
    """Store the picture rotated 90 degrees anticlockwise with EXIF orientation 6, as
    phones do: a viewer that applies the orientation shows the upright picture."""
    exif = Image.Exif()
    exif[_ORIENTATION_TAG] = 6
    image.transpose(Image.Transpose.ROTATE_90).save(path, quality=95, exif=exif)


def _jpeg_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def folder_settings(folder: PetFolder, cache_dir: Path, **fields: object) -> DataSettings:
    """DataSettings that read `folder` as an image folder, caching under `cache_dir`."""
    return DataSettings(
        source="image_folder", root=str(folder.root), cache_dir=str(cache_dir), **fields
    )
