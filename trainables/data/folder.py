"""A class-per-folder tree (the PetImages layout: PetImages/Cat/*.jpg, PetImages/Dog/*.jpg).

Class names are the sorted names of the root's sub-folders; each class's images are every
file below its folder. Every file is listed, not only names ending in .jpg: a Thumbs.db or
a text file is then skipped by the decoder and shows up in the manifest, instead of being
left out without a trace. Files directly in the root (a licence, a readme) belong to no
class and are not listed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from trainables.data.catalogue import Catalogue, stat_file
from trainables.data.decode import FORMAT_OF_EXTENSION
from trainables.data.errors import DataUnavailable

# Extensions that make a folder look like it holds images; only `auto` uses them, to
# decide without decoding anything whether `root` is an image folder.
IMAGE_EXTENSIONS = frozenset(FORMAT_OF_EXTENSION)


def _is_hidden(name: str) -> bool:
    return name.startswith((".", "__"))  # .git, .ipynb_checkpoints, __MACOSX


def class_folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(
        (entry for entry in root.iterdir() if entry.is_dir() and not _is_hidden(entry.name)),
        key=lambda folder: folder.name,
    )


def _walk_files(folder: Path, root: Path) -> Iterator[str]:
    """Every file below `folder` as a "/"-separated path relative to `root` (plain strings:
    a folder of 25,000 photos is listed on every start-up, to key the cache)."""
    for directory, subfolders, names in os.walk(folder):
        subfolders[:] = sorted(name for name in subfolders if not _is_hidden(name))
        relative = Path(directory).relative_to(root).as_posix()
        yield from (f"{relative}/{name}" for name in names)


def has_class_folders_with_images(root: Path) -> bool:
    """Whether `root` has a class folder holding at least one file named like an image."""
    return any(
        os.path.splitext(path)[1].lower() in IMAGE_EXTENSIONS
        for folder in class_folders(root)
        for path in _walk_files(folder, root)
    )


def folder_problem(root: Path) -> str | None:
    """Why `root` is not an image folder (no folder, fewer than 2 class folders), or None:
    checked in a moment, before a search starts anything."""
    if not root.is_dir():
        return (
            f"data.root: no folder at {root}; give a folder with one sub-folder of images per "
            "class (e.g. PetImages with Cat/ and Dog/), or use source 'synthetic'"
        )
    folders = class_folders(root)
    if len(folders) < 2:
        found = [folder.name for folder in folders]
        return (
            f"data.root: {root} needs at least 2 class folders (one sub-folder of images per "
            f"class), found {found}"
        )
    return None


def list_image_folder(root: Path) -> Catalogue:
    """Every file of every class folder of `root`, with its size and modification time."""
    problem = folder_problem(root)
    if problem is not None:
        raise DataUnavailable(problem)
    folders = class_folders(root)
    files = [
        stat_file(root, path, label)
        for label, folder in enumerate(folders)
        for path in _walk_files(folder, root)
    ]
    return Catalogue(
        source="image_folder",
        root=root,
        class_names=tuple(folder.name for folder in folders),
        files=tuple(sorted(files, key=lambda file: file.path)),
    )
