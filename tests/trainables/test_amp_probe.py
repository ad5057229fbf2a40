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
    user_models.THREADS_SEEN.clear()
    cpu_amp_speed(f"{USER}:counts_threads", 16, threads=1)
    assert set(user_models.THREADS_SEEN) == {1}
    assert torch.get_num_threads() == before


def test_past_its_budget_it_stops_after_one_round():
    user_models.THREADS_SEEN.clear()
    cpu_amp_speed(f"{USER}:counts_threads", 16, rounds=5, budget_s=0.0)
    assert len(user_models.THREADS_SEEN) == 4  # a step each way to warm up, then one round
