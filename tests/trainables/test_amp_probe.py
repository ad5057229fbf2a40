"""The probe that times bf16 autocast against float32 on this machine's CPU, on models
whose bf16 steps are known to be slower or faster (they sleep under autocast, or without
it), so that what it reads does not hang on this machine's CPU."""

import torch

from tests.trainables import user_models
from trainables.amp_probe import cpu_amp_speed

USER = "tests.trainables.user_models"


def test_a_model_slower_under_bf16_reads_well_under_one():
    assert cpu_amp_speed(f"{USER}:slow_under_autocast", 32) < 0.5


def test_a_model_faster_under_bf16_reads_well_over_one():
    assert cpu_amp_speed(f"{USER}:slow_without_autocast", 32) > 2.0


def test_it_times_with_the_trials_threads_and_leaves_torchs_as_they_were():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        user_models.THREADS_SEEN.clear()
        cpu_amp_speed(f"{USER}:counts_threads", 16, threads=1)
        assert set(user_models.THREADS_SEEN) == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_it_runs_its_rounds_within_its_budget():
    user_models.THREADS_SEEN.clear()
    cpu_amp_speed(f"{USER}:counts_threads", 16, rounds=3)
    assert len(user_models.THREADS_SEEN) == 2 + 6  # a step each way to warm up, three rounds


def test_past_its_budget_after_the_warm_up_it_reads_the_warm_up_steps():
    user_models.THREADS_SEEN.clear()
    speed = cpu_amp_speed(f"{USER}:counts_threads", 16, rounds=5, budget_s=0.0)
    assert len(user_models.THREADS_SEEN) == 2 and speed > 0
