"""Oxford-IIIT Pet (7,349 photos of 37 breeds) as cats vs dogs, through torchvision.

torchvision's `OxfordIIITPet` finds or downloads the set (into `<root>/oxford-iiit-pet`)
and reads its annotation files; the images are then decoded and cached like any image
folder. Without the set and without a network there is nothing to train on, and the error
says so at once instead of hanging in a download.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock

from trainables.data.catalogue import Catalogue, ImageFile, stat_file
from trainables.data.errors import DataUnavailable

if TYPE_CHECKING:
    from torchvision.datasets import OxfordIIITPet

DOWNLOAD_HOST = ("www.robots.ox.ac.uk", 443)  # where torchvision downloads the set from
PROBE_TIMEOUT_S = 3.0  # a network that cannot connect in this long cannot download 800 MB
_SPLITS = ("trainval", "test")  # the data set's own split; ours is drawn per class instead

log = logging.getLogger("trainables.data")


def list_oxford_pets(root: Path) -> Catalogue:
    """All images of both of the set's splits, labelled 0 = Cat, 1 = Dog."""
    try:
        datasets = _open(root)
    except RuntimeError:  # torchvision: "Dataset not found. You can use download=True"
        _download(root)
        datasets = _open(root)
    base = root / "oxford-iiit-pet"
    files: list[ImageFile] = []
    missing = 0
    for dataset in datasets:
        # torchvision keeps the image paths and cat/dog labels of the annotation file here.
        for path, label in zip(dataset._images, dataset._bin_labels, strict=True):
            if not path.is_file():
                missing += 1
                continue
            files.append(stat_file(base, path.relative_to(base).as_posix(), label))
    if missing:
        log.warning("%d images listed in %s/annotations are not on disk", missing, base)
    return Catalogue(
        source="oxford_pets",
        root=base,
        class_names=tuple(datasets[0].bin_classes),
        files=tuple(sorted(files, key=lambda file: file.path)),
    )


def _open(root: Path) -> list[OxfordIIITPet]:
    # here, not at the top: importing torchvision costs every search and trial over a
    # second (it loads torch._dynamo), and only this source needs it
    from torchvision.datasets import OxfordIIITPet

    return [OxfordIIITPet(root, split=split, target_types="binary-category") for split in _SPLITS]


def _download(root: Path) -> None:
    base = root / "oxford-iiit-pet"
    unreachable = _unreachable_reason(DOWNLOAD_HOST)
    if unreachable:
        raise DataUnavailable(
            f"Oxford-IIIT Pet is not at {base} (no images/ and annotations/ folders there) "
            f"and cannot be downloaded: {DOWNLOAD_HOST[0]} is unreachable ({unreachable}). "
            "Download it where there is a network (torchvision.datasets.OxfordIIITPet(root, "
            "download=True)) and set data.root to that root, or use source 'image_folder' "
            "with your own class folders, or 'synthetic'"
        )
    root.mkdir(parents=True, exist_ok=True)
    log.info("downloading Oxford-IIIT Pet (about 800 MB) into %s", base)
    # Parallel trials must not download into the same folder at once; torchvision skips
    # the download when the set is complete by the time the lock is ours.
    with FileLock(root / ".oxford-iiit-pet.lock"):
        try:
            OxfordIIITPet(root, target_types="binary-category", download=True)
        except (OSError, RuntimeError) as error:  # URLError, HTTPError, a bad checksum
            raise DataUnavailable(
                f"downloading Oxford-IIIT Pet into {base} failed: {error}; use source "
                "'image_folder' or 'synthetic' instead"
            ) from error


def _unreachable_reason(host: tuple[str, int]) -> str:
    """Why a TCP connection to `host` fails within PROBE_TIMEOUT_S, or "" when it works.

    urllib has no timeout by default: behind a firewall that drops packets, torchvision's
    download would hang instead of failing."""
    try:
        socket.create_connection(host, timeout=PROBE_TIMEOUT_S).close()
    except OSError as error:
        return str(error) or type(error).__name__
    return ""
