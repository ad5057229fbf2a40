"""The speed reference: a fixed CPU workload a trial times beside its blocks, in the trial's
own arithmetic, built without touching the trial's random draws, and the scales a search
reads its trials' speed on."""

import math

import pytest
import torch

from tests.trainables.test_classifier import Reports
from trainables.classifier import fit_classifier
from trainables.data import DataSettings, prepare_data
from trainables.reference_kinds import REFERENCE_KINDS, reference_kind, scales_from
from trainables.settings import TrainSettings
from trainables.speed import ConfigSpeed
from trainables.speed_reference import (
    REFERENCE_BATCH,
    REFERENCE_BLOCK_SECONDS,
    SpeedReference,
    measure_scales,
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


def test_each_block_is_timed_after_an_untimed_step_that_brings_the_reference_back_warm(
    monkeypatch,
):
    """Timed from cold after a trial's steps, a config read 1.2-1.5x its own speed over the
    reference (docs/RESULTS.md, section 55)."""
    import trainables.speed_reference as module

    events: list[str] = []
    monkeypatch.setattr(module, "train_step", lambda *args, **kwargs: events.append("step"))
    ticks = iter(range(1000))

    def clock() -> float:
        events.append("clock")
        return next(ticks) * 0.004

    reference = SpeedReference(clock=clock)
    steps = reference.steps
    events.clear()
    reference()
    assert events == ["step", "clock", *["step"] * steps, "clock"]


def test_each_reference_trains_in_its_kinds_arithmetic():
    plain, amp_nhwc = SpeedReference("fp32_contiguous"), SpeedReference("bfloat16_channels_last")
    images = amp_nhwc._batch[0][0]
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert plain._batch[0][0].is_contiguous() and plain._precision.dtype is None
    assert amp_nhwc._precision.dtype == torch.bfloat16
    conv = next(m for m in amp_nhwc._model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(ValueError, match="bf16"):
        SpeedReference("bf16")


def test_a_trials_kind_is_its_precision_and_layout_and_one_number_is_the_plain_kinds():
    assert reference_kind(amp=True, channels_last=False) == "bfloat16_contiguous"
    assert reference_kind(amp=False, channels_last=True) == "fp32_channels_last"
    assert scales_from(1500) == {"fp32_contiguous": 1500.0}
    with pytest.raises(ValueError, match="above 0"):
        scales_from({"fp32_contiguous": 0})
    settings = TrainSettings(amp=True, channels_last=True, speed_scale={"fp32_contiguous": 9.0})
    assert settings.own_speed_scale is None  # no scale of its kind: timed at its moments
    assert TrainSettings(speed_scale=1500).own_speed_scale == 1500.0


def test_the_scales_are_each_references_median_speed_on_this_cpu():
    threads = torch.get_num_threads()
    scales = measure_scales(threads=1, seconds=0.4)
    assert set(scales) == set(REFERENCE_KINDS)
    assert all(0 < scale < math.inf for scale in scales.values())
    assert torch.get_num_threads() == threads  # the caller's threads as they were


@pytest.fixture(scope="module")
def enough_steps():
    return prepare_data(DataSettings(image_size=16, train_per_class=240, val_per_class=16,
                                     test_per_class=16))  # fmt: skip


@pytest.mark.parametrize("amp", [False, True])
def test_a_cpu_trial_on_a_scale_reports_its_speed_over_its_reference_times_its_kinds_scale(
    enough_steps, amp, own_device_gates
):
    """Its gate its own: crowded by another worker's trials, its second epoch timed nothing
    once its configuration had the blocks it wanted (a CI run at e8ae2b8)."""
    reports = Reports()
    # only its own kind's scale is 1000: another's would give another figure
    scales = {kind: 1000.0 if kind == reference_kind(amp, True) else 7.0
              for kind in REFERENCE_KINDS}  # fmt: skip
    settings = TrainSettings(epochs=2, batch_size=8, train_eval_size=16, device="cpu",
                             num_threads=1, amp=amp, channels_last=True,
                             speed_scale=scales)  # fmt: skip
    last = fit_classifier(settings, enough_steps, reports)
    state = TrialRecord.from_dict(reports.states[-1]["state"])
    speeds = ConfigSpeed.from_dict(state.speeds, scale=1000.0)
    assert len(speeds.ratios["8x1"]) >= 2  # a segment's ratio at least every epoch
    over = speeds.over_reference("8x1")
    assert last["throughput"] == pytest.approx(over.images_per_s * 1000.0)
    assert last["throughput_low"] == pytest.approx(over.low * 1000.0)
    # the epoch's time is its wall time, the reference's blocks in it
    assert last["shared_throughput"] == pytest.approx(480 / last["epoch_time_s"])
