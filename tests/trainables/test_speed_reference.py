"""The speed reference: a fixed CPU workload a trial times beside its blocks, built without
touching the trial's random draws, and the scale a search reads its trials' speed on."""

import math

import pytest
import torch

from tests.trainables.test_classifier import Reports
from trainables.classifier import fit_classifier
from trainables.data import DataSettings, prepare_data
from trainables.settings import TrainSettings
from trainables.speed import ConfigSpeed
from trainables.speed_reference import (
    REFERENCE_BATCH,
    REFERENCE_BLOCK_SECONDS,
    SpeedReference,
    measure_scale,
)
from trainables.trial_state import TrialRecord


def test_the_reference_leaves_the_trials_random_draws_as_they_were():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    reference = SpeedReference()
    reference()
    assert torch.equal(torch.rand(3), expected)


def test_a_block_of_the_reference_lasts_its_least_seconds_and_says_its_images_per_second():
    ticks = iter(range(1000))
    # 4 ms between readings: its untimed first block of one step was too short
    reference = SpeedReference(clock=lambda: next(ticks) * 0.004)
    steps = reference.steps
    assert steps > 1 and (steps - 1) * 0.004 < REFERENCE_BLOCK_SECONDS <= steps * 0.004
    assert reference() == pytest.approx(REFERENCE_BATCH * steps / 0.004)


def test_the_scale_is_the_references_median_speed_on_this_cpu():
    threads = torch.get_num_threads()
    scale = measure_scale(threads=1, seconds=0.2)
    assert 0 < scale < math.inf
    assert torch.get_num_threads() == threads  # the caller's threads as they were


@pytest.fixture(scope="module")
def enough_steps():
    return prepare_data(DataSettings(image_size=16, train_per_class=240, val_per_class=16,
                                     test_per_class=16))  # fmt: skip


def test_a_cpu_trial_on_a_scale_reports_its_speed_over_the_reference_times_the_scale(
    enough_steps,
):
    reports = Reports()
    settings = TrainSettings(epochs=2, batch_size=8, train_eval_size=16, device="cpu",
                             num_threads=1, speed_scale=1000.0)  # fmt: skip
    last = fit_classifier(settings, enough_steps, reports)
    state = TrialRecord.from_dict(reports.states[-1]["state"])
    speeds = ConfigSpeed.from_dict(state.speeds, scale=1000.0)
    assert len(speeds.ratios["8x1"]) >= 2  # a segment's ratio at least every epoch
    over = speeds.over_reference("8x1")
    assert last["throughput"] == pytest.approx(over.images_per_s * 1000.0)
    assert last["throughput_low"] == pytest.approx(over.low * 1000.0)
    # the epoch's time is its wall time, the reference's blocks in it
    assert last["shared_throughput"] == pytest.approx(480 / last["epoch_time_s"])
