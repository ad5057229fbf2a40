"""The host's allocator in a trial's process, held to fixed thresholds, so that a trial's
speed does not depend on what its process allocated before.

glibc's malloc serves a block above its mmap threshold (128 KiB at first) with a fresh
mapping, and gives the top of its heap back to the system past its trim threshold; both
thresholds then move on their own as the process frees large blocks. A step of the small
CNN allocates and frees activations of a few MiB: in a fresh process it faulted in about
4,000-11,000 new pages a step, and in a process that had once held larger blocks (a trial
of a larger batch before it, as Tune reuses a worker) it faulted in none, and the same
config trained up to a quarter faster there (docs/RESULTS.md, section 23). With the thresholds
fixed (`mallopt`), which also stops glibc moving them, every trial's process keeps its heap
from step to step, as the warm one did. A block above the largest mmap threshold glibc
takes (32 MiB) was still mapped afresh every time, and a batch of 256 of the small CNN
allocates activations that large: it faulted in about 49,000 pages a step and trained at
0.65x its speed (section 27); so no block is mapped apart (`M_MMAP_MAX` 0): every block
comes from the heap, which keeps what it held up to the trim threshold. That threshold was
256 MiB until 2026-11-28, and a batch of 512 frees more at the end of its step: the heap's
top went back to the system every step and was faulted in again, 23,000-67,000 pages a step
(docs/RESULTS.md, section 41). It is now the largest glibc takes (2 GiB).

Tune trains a function trainable on a thread of its worker, and glibc gives a new thread an
arena of its own, whose extra heaps it unmaps as soon as they are empty, whatever the
thresholds: the first trial of a fresh worker, on a fresh arena, mapped and faulted its
large blocks in again step after step and trained about 9% slower than the trials after it
(whose threads reuse the grown arena). One arena for the process (`WORKER_ENV`, read by
glibc as the process starts, so it is set in the environment Ray starts its workers with)
takes that away too (section 24). `give_back_freed_memory` returns the heap's free memory
at once, where a long process moves on to other work (the capacity table's next row).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
# The largest mmap threshold glibc takes on 64-bit (half its heap's largest size): blocks
# up to 32 MiB come from the heap. Past the trim threshold the heap's free top goes back.
MMAP_THRESHOLD_BYTES = 32 << 20
# mallopt takes an int: 2 GiB less a byte. A step that frees more (a large model's large
# batch on a CPU) gives the rest back and faults it in again, in a step of seconds.
TRIM_THRESHOLD_BYTES = (1 << 31) - 1
# For the environment of the processes trials run in (a search passes it in Ray's runtime
# environment): every thread allocates from the main arena.
WORKER_ENV = {"MALLOC_ARENA_MAX": "1"}


@functools.cache
def _c_library() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


@functools.cache
def hold_host_allocator() -> bool:
    """Fix glibc's thresholds in this process and map no block apart (once: they are the
    process's); False where the C library is not glibc (macOS, musl: nothing is done,
    nothing fails)."""
    if not fix_thresholds():
        return False
    return _c_library().mallopt(_M_MMAP_MAX, 0) == 1  # no block mapped apart, however large


def fix_thresholds() -> bool:
    """glibc's mmap and trim thresholds fixed, blocks above 32 MiB still mapped apart: the
    hold until docs/RESULTS.md section 27, which `bench/host_allocator.py` compares with it."""
    mallopt = getattr(_c_library(), "mallopt", None)
    if mallopt is None:
        return False
    mmap_set = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    trim_set = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    return mmap_set and trim_set


def give_back_freed_memory() -> None:
    """Return the heap's free memory to the system now (glibc's `malloc_trim`), whatever the
    trim threshold: between the capacity table's rows, so that the next technique's model
    and batches do not pile up on top of the last one's. Elsewhere than glibc, nothing."""
    malloc_trim = getattr(_c_library(), "malloc_trim", None)
    if malloc_trim is not None:
        malloc_trim(0)
