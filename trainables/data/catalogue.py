"""A data set's image files before decoding: what the decoded cache is keyed on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ImageFile:
    path: str  # relative to the catalogue's root, "/"-separated
    label: int  # index into the catalogue's class_names
    size: int  # bytes; with mtime_ns it tells a changed file from the one cached
    mtime_ns: int


@dataclass(frozen=True)
class Catalogue:
    source: str  # "image_folder" or "oxford_pets"
    root: Path  # absolute
    class_names: tuple[str, ...]
    files: tuple[ImageFile, ...]  # sorted by path

    def absolute(self, file: ImageFile) -> Path:
        return self.root / file.path


def stat_file(root: Path, relative: str, label: int) -> ImageFile:
    try:
        stat = os.stat(os.path.join(root, relative))
    except OSError:  # a dead symlink or no permission: listed, and skipped by the decoder
        return ImageFile(path=relative, label=label, size=-1, mtime_ns=0)
    return ImageFile(path=relative, label=label, size=stat.st_size, mtime_ns=stat.st_mtime_ns)
