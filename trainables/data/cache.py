"""Decoded images on disk, made once per (files, image size) and shared by every trial.

Layout under the cache folder (see `DataSettings.cache_path`):

    decoded/<folder name>-<size>px-<key>/   one entry per key, published whole
        images.npy      uint8 (N, 3, S, S), read back memory-mapped
        labels.npy      int64 (N,)
        index.json      class names and the kept files, row by row
        manifest.json   every skipped or converted file, why, and the totals
    decoded/<folder name>-<size>px-<key>.lock

The key hashes the absolute root, every file's relative path, label, size and
modification time, the image size and `CODE_VERSION`: a file added, removed or changed
gives a new key and so a new entry (old entries stay until someone deletes them).

An entry is written into a temporary folder and renamed into place (`os.replace`), so a
reader sees a whole entry or none. A file lock around the build makes parallel trials and
parallel searches decode once: whoever gets the lock decodes, the others wait and reuse.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock, Timeout

from trainables.data.catalogue import Catalogue, ImageFile
from trainables.data.decode import decode_image
from trainables.data.errors import DataUnavailable
from trainables.data.manifest import Manifest

# Bump when decoding changes the pixels it produces, so that old entries are not reused.
CODE_VERSION = 1

IMAGES, LABELS, INDEX, MANIFEST = "images.npy", "labels.npy", "index.json", "manifest.json"

log = logging.getLogger("trainables.data")


@dataclass(frozen=True)
class DecodedSet:
    images: np.ndarray  # uint8 (N, 3, S, S), memory-mapped read-only
    labels: np.ndarray  # int64 (N,)
    class_names: tuple[str, ...]
    directory: Path  # the cache entry
    reused: bool  # True when an existing entry was read, False when this call decoded
    skipped: int  # files that could not be decoded


def cache_key(catalogue: Catalogue, image_size: int) -> str:
    digest = hashlib.sha256()
    about = [CODE_VERSION, catalogue.source, str(catalogue.root), catalogue.class_names, image_size]
    digest.update(json.dumps(about).encode())
    for file in catalogue.files:
        digest.update(f"\n{file.path}\0{file.label}\0{file.size}\0{file.mtime_ns}".encode())
    return digest.hexdigest()[:20]


def entry_path(catalogue: Catalogue, image_size: int, cache_root: Path) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", catalogue.root.name) or "root"
    return cache_root / "decoded" / f"{name}-{image_size}px-{cache_key(catalogue, image_size)}"


def decoded_images(catalogue: Catalogue, image_size: int, cache_root: Path) -> DecodedSet:
    """The catalogue's images decoded at `image_size`: from the cache, or decoded now."""
    entry = entry_path(catalogue, image_size, cache_root)
    if entry.is_dir():  # published whole by a rename, so no lock is needed to read it
        return _reuse(entry)
    entry.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(entry.with_name(entry.name + ".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info(
            "waiting for another process decoding %s (lock %s)", catalogue.root, lock.lock_file
        )
        lock.acquire()
    try:
        if entry.is_dir():  # built while this process waited for the lock
            return _reuse(entry)
        _build(catalogue, image_size, entry)
        return _load(entry, reused=False)
    finally:
        lock.release()


def _reuse(entry: Path) -> DecodedSet:
    log.info("reused cache %s", entry)
    return _load(entry, reused=True)


def _load(entry: Path, reused: bool) -> DecodedSet:
    index = json.loads((entry / INDEX).read_text(encoding="utf-8"))
    return DecodedSet(
        images=np.load(entry / IMAGES, mmap_mode="r"),
        labels=np.load(entry / LABELS),
        class_names=tuple(index["class_names"]),
        directory=entry,
        reused=reused,
        skipped=index["skipped"],
    )


def _build(catalogue: Catalogue, image_size: int, entry: Path) -> None:
    """Decode every file into a temporary folder, then rename it to `entry`."""
    if not catalogue.files:
        raise DataUnavailable(
            f"no files in the class folders {list(catalogue.class_names)} of {catalogue.root}"
        )
    for stale in entry.parent.glob(f"{entry.name}.partial-*"):
        shutil.rmtree(stale)  # left by a process that died mid-build; we hold the lock
    partial = entry.with_name(f"{entry.name}.partial-{os.getpid()}")
    partial.mkdir()
    try:
        started = time.perf_counter()
        manifest, kept = _decode_into(catalogue, image_size, partial / IMAGES)
        seconds = time.perf_counter() - started
        if not kept:
            raise DataUnavailable(
                f"none of the {len(catalogue.files)} files of {catalogue.root} could be "
                f"decoded as an image: {manifest.by_reason('skipped')}"
            )
        labels = np.array([file.label for file in kept], dtype=np.int64)
        np.save(partial / LABELS, labels)
        index = {
            "class_names": list(catalogue.class_names),
            "files": [file.path for file in kept],
            "skipped": manifest.skipped_files,
        }
        _write_json(partial / INDEX, index)
        about = {"key": entry.name, "image_size": image_size, "code_version": CODE_VERSION}
        about |= {"decoded_at": _now(), "decode_seconds": round(seconds, 3)}
        _write_json(partial / MANIFEST, manifest.as_json(**about))
        os.replace(partial, entry)
    finally:
        shutil.rmtree(partial, ignore_errors=True)  # gone after the rename unless it failed
    log.info(
        "decoded %d images of %s at %d px in %.1f s (%d skipped; manifest: %s)",
        len(kept),
        catalogue.root,
        image_size,
        seconds,
        manifest.skipped_files,
        entry / MANIFEST,
    )


def _decode_into(
    catalogue: Catalogue, image_size: int, path: Path
) -> tuple[Manifest, list[ImageFile]]:
    """Decode file by file straight into a memory-mapped .npy, so a 224 px set of 25,000
    images never sits in memory whole. In one process: on the 2-core machine this was
    measured on, a 2-process pool took 0.7 to 1.3 times as long from run to run, threads
    were never faster (bench/data_path.py), and a Ray trial is better off without children."""
    manifest, kept = Manifest(catalogue), []
    shape = (len(catalogue.files), 3, image_size, image_size)
    images = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=shape)
    for file in catalogue.files:
        decoded = decode_image(catalogue.absolute(file), image_size)
        manifest.add(file, decoded)
        if decoded.pixels is not None:
            images[len(kept)] = decoded.pixels
            kept.append(file)
    images.flush()
    offset, row_shape = images.offset, images.shape[1:]
    del images
    if 0 < len(kept) < len(catalogue.files):
        _keep_first_rows(path, len(kept), offset, row_shape)
    return manifest, kept


def _keep_first_rows(path: Path, rows: int, offset: int, row_shape: tuple[int, ...]) -> None:
    """Cut the .npy to its first `rows` rows (skipped files left unused rows at the end) in
    place: a new header of the same length, then truncate; the kept rows never move."""
    header = repr({"descr": "|u1", "fortran_order": False, "shape": (rows, *row_shape)})
    length = offset - 10  # after the magic string, the version and the header's length
    text = header.ljust(length - 1) + "\n"  # the shape only got shorter: it fits
    with path.open("r+b") as file:
        file.write(b"\x93NUMPY\x01\x00" + length.to_bytes(2, "little") + text.encode("latin1"))
        file.truncate(offset + rows * math.prod(row_shape))


def _write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
