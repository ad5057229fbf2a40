"""A config timed against its baseline in alternation: a known slowdown is recovered within
the ratio's interval, the trial's own results are those it has without the timing, and the
baseline is checked like any settings."""

import math

import pytest
from pydantic import ValidationError

from tests.trainables.test_classifier import Reports
from tests.trainables.test_speed_in_a_trial import settings
from trainables.classifier import fit_classifier
from trainables.data import DataSettings, prepare_data
from trainables.settings import SAME_WORK_PER_IMAGE, TIMED_AGAINST, TrainSettings


@pytest.fixture(scope="module")
def data():
    return prepare_data(DataSettings(image_size=16, train_per_class=48, val_per_class=16,
                                     test_per_class=16))  # fmt: skip


def test_a_step_that_sleeps_twice_as_long_is_measured_at_half_the_speed_within_its_interval(data):
    """Both models sleep in their forward (50 and 100 ms) and compute next to nothing: with
    c the rest of a step (its compute and a sleeper's wait for a core: under 25 ms here,
    even beside the suite's other worker), the true ratio (50 + c) / (100 + c) is between
    0.50 and 0.60. A ratio inverted, or timed one side after the other, falls outside."""
    reports = Reports()
    last = fit_classifier(
        settings(model="tests.trainables.user_models:sleeps_100ms", epochs=1,
                 speed_baseline={"model": "tests.trainables.user_models:sleeps_50ms"},
                 speed_precision=0.01, speed_baseline_s=3),
        data, reports,
    )  # fmt: skip
    low, ratio, high = (last[f"speed_vs_baseline{end}"] for end in ("_low", "", "_high"))
    assert low <= ratio <= high
    assert low <= 0.60 and high >= 0.50, (low, ratio, high)
    assert high - low < 0.1


def test_the_timing_comes_after_the_last_epoch_and_leaves_the_trials_results_as_they_were(data):
    plain, timed = Reports(), Reports()
    fit_classifier(settings(), data, plain)
    fit_classifier(settings(speed_baseline={"amp": True}, speed_baseline_s=0.5), data, timed)
    assert math.isnan(timed.metrics[0]["speed_vs_baseline"])
    assert timed.metrics[-1]["speed_vs_baseline"] > 0
    assert math.isnan(plain.metrics[-1]["speed_vs_baseline"])
    for name in ("val_acc", "best_val_acc", "gen_gap", "train_loss", "train_steps"):
        assert timed.metrics[-1][name] == plain.metrics[-1][name], name
    saved, unmoved = timed.states[-1]["model"], plain.states[-1]["model"]
    assert all((saved[name] == unmoved[name]).all() for name in unmoved)


def test_untimed_a_trial_times_no_baseline_either(data):
    last = fit_classifier(settings(epochs=1, speed_precision=0, speed_baseline={"amp": True}),
                          data, Reports())  # fmt: skip
    assert math.isnan(last["speed_vs_baseline"])


def test_a_grown_batch_is_timed_as_its_trial_trained_it(data):
    """AdaBatch against none: the changed side trains batch 8 and then 16, and is timed so."""
    reports = Reports()
    last = fit_classifier(
        settings(epochs=2, adabatch_growth=2, adabatch_interval=1, speed_baseline_s=0.5,
                 speed_baseline={"adabatch_growth": 1}),
        data, reports,
    )  # fmt: skip
    assert last["physical_batch_size"] == 16 and last["speed_vs_baseline"] > 0


def test_a_baseline_of_another_batch_has_one_fresh_model_train_both_sides(data, monkeypatch):
    """Batch 8 grown to 16 against batch 16 throughout: the same steps at batch 16, so one
    model trains both sides' configurations; an optimizer changed needs a model of each."""
    import trainables.timing as timing

    started, real_start = [], timing.start_trial

    def counted(trial_settings, *rest):
        started.append(trial_settings)
        return real_start(trial_settings, *rest)

    monkeypatch.setattr(timing, "start_trial", counted)
    grown = settings(epochs=2, adabatch_growth=2, adabatch_interval=1, speed_baseline_s=0.5,
                     speed_baseline={"batch_size": 16, "adabatch_growth": 1})  # fmt: skip
    last = fit_classifier(grown, data, Reports())
    assert last["speed_vs_baseline"] > 0 and started == [grown]
    started.clear()
    other_optimizer = settings(epochs=1, speed_baseline={"optimizer": "adam"}, speed_baseline_s=0.5)
    last = fit_classifier(other_optimizer, data, Reports())
    assert last["speed_vs_baseline"] > 0 and len(started) == 2


def test_a_block_both_sides_train_is_sized_for_the_side_it_weighs_most_in(data, monkeypatch):
    """Batch 8 grown to 16 against batch 16 throughout: batch 16 is half the grown side's
    images and all of the baseline's, so its block is the baseline's whole 0.1 s."""
    import trainables.timing as timing

    sized, real_steps = [], timing.paired_block_steps

    def recorded(seconds_per_step, share):
        sized.append(share)
        return real_steps(seconds_per_step, share)

    monkeypatch.setattr(timing, "paired_block_steps", recorded)
    grown = settings(epochs=2, adabatch_growth=2, adabatch_interval=1, speed_baseline_s=0.5,
                     speed_baseline={"batch_size": 16, "adabatch_growth": 1})  # fmt: skip
    fit_classifier(grown, data, Reports())
    assert sorted(sized) == [0.5, 1.0]  # batch 8: half of one side; batch 16: all of the other
    shares = timing.largest_shares([{"8x1": 1.0, "16x1": 3.0}, {"16x1": 2.0}])
    assert shares == {"8x1": 0.25, "16x1": 1.0}


def test_a_block_is_sized_by_the_speed_its_trial_measured_else_by_its_warm_up_step(
    data, monkeypatch
):
    """Batch 8 against batch 16: the trial timed batch 8 over its epoch, so that block is
    sized by that speed; batch 16 it never trained, so by its one warm-up step."""
    import trainables.timing as timing

    sized, seen = [], {}
    real_steps, real_side = timing.paired_block_steps, timing.alternation_side

    def recorded(seconds_per_step, share):
        sized.append(seconds_per_step)
        return real_steps(seconds_per_step, share)

    def side(*args, known=None, **kwargs):
        seen["known"] = known
        return real_side(*args, known=known, **kwargs)

    monkeypatch.setattr(timing, "paired_block_steps", recorded)
    monkeypatch.setattr(timing, "alternation_side", side)
    fit_classifier(settings(epochs=1, speed_baseline={"batch_size": 16}, speed_baseline_s=0.5),
                   data, Reports())  # fmt: skip
    trained = seen["known"].of("8x1")
    assert sized[0] == pytest.approx(8 / trained.images_per_s)  # the changed side first
    assert seen["known"].of("16x1") is None and sized[1] > 0


def test_a_baseline_changes_only_settings_of_a_step_and_keeps_their_rules():
    with pytest.raises(ValidationError, match="not epochs"):
        TrainSettings(speed_baseline={"epochs": 3})
    with pytest.raises(ValidationError, match="names no setting"):
        TrainSettings(speed_baseline={})
    with pytest.raises(ValidationError, match="sgd_nesterov needs momentum"):
        TrainSettings(momentum=0, speed_baseline={"optimizer": "sgd_nesterov"})
    with pytest.raises(ValidationError, match="valid integer"):
        TrainSettings(speed_baseline={"batch_size": "64"})
    baseline = TrainSettings(batch_size=64, speed_baseline={"batch_size": 32}).baseline()
    assert baseline.batch_size == 32 and baseline.speed_baseline is None


def test_what_leaves_a_steps_work_alone_is_a_setting_a_baseline_may_change():
    assert SAME_WORK_PER_IMAGE <= TIMED_AGAINST - {"target_acc"} | {"target_acc"}
    assert SAME_WORK_PER_IMAGE - {"target_acc"} <= TIMED_AGAINST
    assert {"batch_size", "amp", "optimizer", "accumulation_steps"} <= TIMED_AGAINST


def test_every_block_of_the_alternation_passes_the_trials_gate(data, monkeypatch, tmp_path):
    """Warm-up blocks too: a neighbour's timing window holds them out, as any step."""
    import trainables.classifier as classifier
    from trainables.device_gate import DeviceGate

    class Counting(DeviceGate):
        passed = 0

        def step(self):
            Counting.passed += 1
            return super().step()

    monkeypatch.setattr(classifier, "trial_gate", lambda device: Counting("cpu", tmp_path))
    fit_classifier(settings(epochs=1), data, Reports())
    plain, Counting.passed = Counting.passed, 0
    fit_classifier(settings(epochs=1, speed_baseline={"amp": True}, speed_baseline_s=0.3),
                   data, Reports())  # fmt: skip
    # a block passes the gate once: two sides, a warm-up block and four rounds at least
    assert Counting.passed >= plain + 2 * (1 + 4)
