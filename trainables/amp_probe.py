"""How fast AMP trains on this machine's CPU against float32: a probe that a search of CPU
trials sampling AMP runs before it starts (`search.devices.leave_out_slow_amp`).

On the CPU, AMP is bf16 autocast (`trainables.precision`). A CPU with bfloat16 instructions
(AVX512-BF16, AMX) trained the main search's small CNN 1.12-1.24x faster under it
(docs/RESULTS.md, section 22); one without them (AVX2 only) emulates bf16, and there the main
search's AMP trials trained at about a tenth of the speed of float32's and took most of the
search's time (section 31). Torch has no public flag that tells the two apart, so this times
them: the config's model on random images, one training step (`trainables.step`) each way in
alternation (A B A B), the rounds' ratios combined as every speed effect's are
(`trainables.speed.paired_ratio`); about a second where bf16 is emulated, a few hundredths
where it is not.
"""

from __future__ import annotations

import time

import torch

from trainables.models import build_model
from trainables.precision import precision_for
from trainables.speed import paired_ratio
from trainables.step import train_step

PROBE_BATCH = 32  # images per probe step: the main space's batches run 16 to 256


def cpu_amp_speed(
    model_name: str,
    image_size: int,
    *,
    threads: int = 1,
    rounds: int = 3,
    budget_s: float = 5.0,
) -> float:
    """bf16 autocast's training throughput over float32's on this CPU (above 1: AMP is
    faster), `threads` torch threads as a trial has. After one step each way to warm up,
    `rounds` rounds of one step each way, their paired ratio; past `budget_s` it
    stops at the end of a round (a large model on an emulating CPU: where the warm-up
    alone passed it, the warm-up steps are the one round)."""
    cpu = torch.device("cpu")
    model = build_model(model_name, num_classes=2, image_size=image_size, device=cpu)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(PROBE_BATCH, 3, image_size, image_size)
    targets = torch.randint(0, 2, (PROBE_BATCH,))
    ways = {amp: precision_for(amp, "float16", cpu) for amp in (False, True)}

    def step_s(amp: bool) -> float:
        started = time.perf_counter()
        train_step(model, optimizer, [(inputs, targets)], ways[amp], images=PROBE_BATCH)
        return time.perf_counter() - started

    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        started = time.perf_counter()
        warm_up = {amp: [step_s(amp)] for amp in (False, True)}  # allocations, kernel choices
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(rounds):
            if time.perf_counter() - started > budget_s:
                break
            for amp in (False, True):
                times[amp].append(step_s(amp))
        if not times[True]:
            times = warm_up
    finally:
        torch.set_num_threads(threads_before)
    return paired_ratio(times[False], times[True]).ratio  # the seconds of equal batches
