"""A trial's process holds glibc's allocator to fixed thresholds: its steps reuse the heap,
whatever the process allocated before (trainables.host_memory). The step loop is
bench/host_allocator.py's (the main search's knee's step, in a fresh process)."""

import importlib.util
import platform
import sys
from collections.abc import Callable

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="glibc's allocator",
)

spec = importlib.util.spec_from_file_location(
    "host_allocator_bench", REPO / "bench" / "host_allocator.py"
)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench
spec.loader.exec_module(bench)

A_SHORT_FIT = """
from trainables.classifier import fit_classifier
from trainables.data import DataSettings, prepare_data
from trainables.settings import TrainSettings
data = prepare_data(DataSettings(image_size=16, train_per_class=24, val_per_class=8,
                                 test_per_class=8, seed=0, cache_dir={cache!r}))
fit_classifier(TrainSettings(epochs=1, batch_size=8, train_eval_size=16, device="cpu"), data,
               lambda metrics, checkpoint: None)
"""
# Left alone, 6,500-11,000 pages a step on the project's machine over 10 to 60 counted steps;
# held, 0-102 (2026-11-28; the bench: python bench/host_allocator.py). The bounds leave an
# order of magnitude each side. Left
# alone, glibc's thresholds move with what the process freed, and one process in CI on
# 2026-11-28 faulted 986 a step; held, one beside the suite's other worker faulted 282 a
# step (2026-12-06). So each side is asked of one of three processes (the next one starts
# only where the one before missed).
LEFT_ALONE_AT_LEAST = 1000
TRIES = 3
HELD_AT_MOST = 250


LARGE_HELD_AT_MOST = 2500
# Held, a process at batch 512 still maps a fresh 64 MiB heap (16,384 pages) now and then:
# 0, 1 or 2 of them over the 10 counted steps in four processes (0, 1638.4 and 3276.8 pages
# a step, 2026-12-02, one of them in CI); given back every step it is 23,000-67,000 a step.
# Half a heap a step tells the two apart and leaves room for a few such heaps.
GROWN_HEAPS_HELD_AT_MOST = 8192


# Steps counted after the bench's warm-up: a step left alone faults in its pages every time,
# a held one none once warm, so a page count needs fewer steps than the bench's speed does.
COUNTED_STEPS = 10


def pages_faulted_a_step(
    before: str, batch: int | None = None, channels_last: bool = False
) -> float:
    """At the knee's step, or on batches of `batch`, one a step (as the bench's --batch-size)."""
    batch, accumulation = bench.KNEE_STEP if batch is None else (batch, 1)
    run = bench.one_run(before, batch, accumulation, COUNTED_STEPS, channels_last)
    return run["faults_per_step"]


def in_one_of_three(measure: Callable[[], float], holds: Callable[[float], bool]) -> bool:
    return any(holds(measure()) for _ in range(TRIES))


def test_left_alone_glibc_faults_in_thousands_of_pages_a_step_and_held_almost_none():
    assert in_one_of_three(lambda: pages_faulted_a_step(""), lambda n: n > LEFT_ALONE_AT_LEAST)
    assert in_one_of_three(lambda: pages_faulted_a_step(bench.HELD), lambda n: n < HELD_AT_MOST)


def test_held_a_batch_whose_activations_pass_32_mib_reuses_the_heap_too():
    # batches of 256: the thresholds alone faulted in 39,000-49,000 pages a step over the 10
    # counted steps (blocks over glibc's largest mmap threshold mapped afresh), held none
    assert in_one_of_three(lambda: pages_faulted_a_step(bench.THRESHOLDS_ONLY, batch=256),
                           lambda n: n > 10 * LARGE_HELD_AT_MOST)  # fmt: skip
    assert in_one_of_three(lambda: pages_faulted_a_step(bench.HELD, batch=256),
                           lambda n: n < LARGE_HELD_AT_MOST)  # fmt: skip


def test_held_a_batch_that_frees_more_than_256_mib_at_its_steps_end_keeps_its_heap():
    # channels-last batches of 512: the trim threshold at 256 MiB (the hold until
    # 2026-11-28) gave the heap's top back and faulted in 23,000-67,000 pages a step in the
    # bench's runs, but none in one CI process (whether the freed top passes 256 MiB varies
    # with the heap's layout), so only the held side is asserted
    assert in_one_of_three(
        lambda: pages_faulted_a_step(bench.HELD, batch=512, channels_last=True),
        lambda n: n < GROWN_HEAPS_HELD_AT_MOST,
    )


def test_a_trial_holds_its_process_allocator(tmp_path):
    a_short_fit = A_SHORT_FIT.format(cache=str(tmp_path))
    assert in_one_of_three(lambda: pages_faulted_a_step(a_short_fit), lambda n: n < HELD_AT_MOST)
