"""A trial's throughput is its config's timed speed, with an interval; what it got while
sharing its device is a metric of its own; its time to target is its own."""

import math

import pytest

from tests.trainables.test_classifier import Reports
from trainables.classifier import fit_classifier
from trainables.data import DataSettings, prepare_data
from trainables.settings import TrainSettings
from trainables.trial_state import TrialRecord

# this worker's trials alone on their gate: another worker's would crowd it
pytestmark = pytest.mark.usefixtures("own_device_gates")


@pytest.fixture(scope="module")
def enough_steps():
    """Enough steps an epoch (480 images in batches of 8) for a timing window's blocks."""
    return prepare_data(DataSettings(image_size=16, train_per_class=240, val_per_class=16,
                                     test_per_class=16))  # fmt: skip


def settings(**changes) -> TrainSettings:
    base = {"epochs": 2, "batch_size": 8, "train_eval_size": 16, "device": "cpu",
            "num_threads": 1, "speed_window_s": 0.5}  # fmt: skip
    return TrainSettings(**{**base, **changes})


def test_a_trial_reports_its_timed_speed_with_an_interval_beside_what_it_got_sharing(
    enough_steps,
):
    reports = Reports()
    fit_classifier(settings(), enough_steps, reports)
    for metrics in reports.metrics:
        assert metrics["throughput"] > 0
        assert metrics["shared_throughput"] == pytest.approx(480 / metrics["epoch_time_s"])
    last = reports.metrics[-1]  # six blocks or more by then: an interval
    assert last["throughput_low"] <= last["throughput"] <= last["throughput_high"]
    state = TrialRecord.from_dict(reports.states[-1]["state"])
    assert list(state.speeds["blocks"]) == ["8x1"] and len(state.speeds["blocks"]["8x1"]) >= 6


def test_untimed_its_throughput_is_the_wall_rate_without_an_interval(enough_steps):
    reports = Reports()
    last = fit_classifier(settings(epochs=1, speed_precision=0), enough_steps, reports)
    assert last["throughput"] == pytest.approx(last["shared_throughput"])
    assert math.isnan(last["throughput_low"]) and math.isnan(last["throughput_high"])


def test_its_time_to_target_is_its_images_at_its_own_speed(enough_steps):
    """A target every model reaches at once: the first epoch's 480 images at the speed."""
    reports = Reports()
    first = fit_classifier(settings(epochs=1, target_acc=0.01), enough_steps, reports)
    assert first["time_to_target_s"] == pytest.approx(480 / first["throughput"])
    assert first["train_time_s"] == pytest.approx(first["epoch_time_s"])  # the wall, as it ran


def test_a_resumed_trial_keeps_the_speed_it_timed(enough_steps):
    reports = Reports()
    fit_classifier(settings(epochs=2), enough_steps, reports)
    resumed = Reports()
    fit_classifier(settings(epochs=2), enough_steps, resumed, resume_state=reports.states[0])
    timed_before = reports.states[0]["state"]["speeds"]["blocks"]["8x1"]
    timed_after = resumed.states[-1]["state"]["speeds"]["blocks"]["8x1"]
    assert timed_after[: len(timed_before)] == timed_before


def test_a_trial_computes_on_its_num_threads_and_leaves_the_count_as_it_was(enough_steps):
    """Called directly too (not only through Tune's adapter): the node's gate counts the
    threads a trial registers, so they must be the threads it computes on."""
    import torch

    from tests.trainables import user_models

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        user_models.THREADS_SEEN.clear()
        fit_classifier(settings(epochs=1, model="tests.trainables.user_models:counts_threads"),
                       enough_steps, Reports())  # fmt: skip
        assert set(user_models.THREADS_SEEN) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_trial_that_ended_no_longer_counts_on_its_device(enough_steps, own_device_gates):
    """A Ray actor kept for the next trial lives on after its trial: registered still, its
    threads crowded its node's trials, which then timed only in held windows."""
    import os

    from tests.trainables import user_models

    user_models.MEMBERS_SEEN.clear()
    fit_classifier(settings(epochs=1, model="tests.trainables.user_models:sees_gate_members"),
                   enough_steps, Reports())  # fmt: skip
    member = own_device_gates / "cpu.members" / str(os.getpid())
    assert user_models.MEMBERS_SEEN and set(user_models.MEMBERS_SEEN) == {"1"}  # while it trained
    assert not member.exists()


def test_a_batch_of_one_whole_step_an_epoch_is_timed_from_its_second_epoch(enough_steps):
    """480 images in steps of 256 (batch 128, accumulation 2): one whole step an epoch, its
    first, and a partial one. Once warm it is timed each epoch: six epochs, six blocks."""
    reports = Reports()
    last = fit_classifier(settings(epochs=7, batch_size=128, accumulation_steps=2,
                                   warmup_epochs=0), enough_steps, reports)  # fmt: skip
    blocks = TrialRecord.from_dict(reports.states[-1]["state"]).speeds["blocks"]["128x2"]
    assert len(blocks) == 6
    assert last["throughput_low"] <= last["throughput"] <= last["throughput_high"]
    assert last["throughput"] != pytest.approx(last["shared_throughput"])  # not the wall rate
