from dataclasses import replace

import pytest

from search.feasibility import (
    MemoryFootprint,
    MemoryModel,
    OomForecast,
    needs_at_least,
    predicted_oom,
)
from trainables.settings import TrainSettings


def footprint(**settings) -> MemoryFootprint:
    return MemoryFootprint.of(TrainSettings(**settings))


BASE = {"model": "resnet18", "batch_size": 128, "optimizer": "sgd", "memory_budget_mb": 1000.0}
FAILED = footprint(**BASE)


def test_the_same_config_or_a_larger_batch_needs_at_least_as_much():
    assert needs_at_least(FAILED, FAILED)
    assert needs_at_least(footprint(**{**BASE, "batch_size": 256}), FAILED)
    assert needs_at_least(footprint(**{**BASE, "memory_budget_mb": 500.0}), FAILED)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"batch_size": 64}, "a smaller batch"),
        ({"model": "small_cnn"}, "another model"),
        ({"data": {"image_size": 32}}, "smaller images"),
        ({"amp": True}, "AMP, which the failed trial lacked"),
        (
            {"activation_checkpointing": True},
            "activation checkpointing, which the failed trial lacked",
        ),
        ({"eval_batch_size": 64}, "a smaller evaluation batch"),
        ({"momentum": 0.0}, "an optimizer with less state"),
        ({"memory_budget_mb": 2000.0}, "a larger budget"),
        ({"max_batch_size": 64}, "a physical batch capped below the failed one"),
    ],
)
def test_a_config_that_may_need_less_is_never_predicted(change, why):
    candidate = footprint(**{**BASE, **change})
    assert not needs_at_least(candidate, FAILED), why


def test_dropping_a_memory_saving_switch_the_failed_trial_had_needs_more():
    failed = footprint(model="resnet18", batch_size=64, activation_checkpointing=True)
    assert needs_at_least(footprint(model="resnet18", batch_size=64), failed)
    assert needs_at_least(footprint(model="resnet18", batch_size=64, optimizer="adam"), failed)


def test_amp_on_one_side_only_is_never_predicted_either_way():
    """AMP needs less at large batches and more at small ones (its half-size weight copies)."""
    with_amp = footprint(model="resnet18", batch_size=64, amp=True)
    without = footprint(model="resnet18", batch_size=64)
    assert not needs_at_least(without, with_amp) and not needs_at_least(with_amp, without)
    assert needs_at_least(footprint(model="resnet18", batch_size=128, amp=True), with_amp)


def test_checkpointing_with_other_segments_is_not_comparable():
    failed = footprint(model="resnet18", batch_size=64, activation_checkpointing=True)
    other = footprint(
        model="resnet18", batch_size=64, activation_checkpointing=True, recomputed_segments=2
    )
    assert not needs_at_least(other, failed)


def test_the_autotuner_off_saves_memory_so_it_is_only_predicted_if_the_failure_had_it_off():
    on = footprint(model="resnet18", batch_size=64, cudnn_benchmark=True)
    off = footprint(model="resnet18", batch_size=64, cudnn_benchmark=False)
    assert needs_at_least(on, off) and not needs_at_least(off, on)


def test_adabatch_growth_is_judged_by_the_starting_batch_because_growth_never_runs_out():
    grows = footprint(**{**BASE, "batch_size": 64, "adabatch_growth": 4})
    assert not needs_at_least(grows, FAILED)


def test_the_batch_a_trial_actually_failed_at_is_what_later_trials_are_compared_with():
    failed_late = MemoryFootprint.of(TrainSettings(model="resnet18", batch_size=32), batch_size=96)
    assert not needs_at_least(footprint(model="resnet18", batch_size=64), failed_late)
    assert needs_at_least(footprint(model="resnet18", batch_size=96), failed_late)


def test_the_prediction_names_the_trial_it_was_inferred_from():
    failures = {"a": replace(FAILED, batch_size=512), "b": FAILED}
    assert predicted_oom(footprint(**{**BASE, "batch_size": 200}), failures) == "b"
    assert predicted_oom(footprint(**{**BASE, "batch_size": 100}), failures) is None


def test_the_forecast_says_a_config_runs_out_like_a_failure_or_over_its_predicted_budget():
    forecast = OomForecast(MemoryModel(probe=lambda settings: lambda batch: 10 + 0.5 * batch))
    fits = TrainSettings.from_config({"batch_size": 32, "memory_budget_mb": 40})
    over = TrainSettings.from_config({"batch_size": 64, "memory_budget_mb": 40})
    assert not forecast.runs_out(fits) and forecast.runs_out(over)
    assert forecast.verdict(over)[1].predicted_mb == 42
    forecast.failures["a"] = MemoryFootprint.of(fits)
    assert forecast.verdict(fits)[0] == "a" and forecast.runs_out(fits)


def test_on_a_gpu_the_limit_is_learned_from_the_trials_reports_per_budget():
    """The share less the process's context is known only on a GPU worker: until a trial
    reports it, nothing is predicted; after, a line through reserved peaks is held to it."""
    model = MemoryModel(on_gpu=True)
    settings = TrainSettings.from_config({"model": "resnet50", "batch_size": 512})
    assert model.predict(settings) is None  # no line, no limit
    for batch, peak in ((16, 1000.0), (64, 2920.0)):  # 360 + 40 MiB per image
        model.observe(settings.model_copy(update={"batch_size": batch}), batch, peak)
    assert model.predict(settings) is None  # a line, but no limit yet
    model.observe(settings, 16, 1000.0, limit_mb=19_700.0)
    model.observe(settings, 16, 1000.0, limit_mb=19_500.0)  # a node whose context is larger
    prediction = model.predict(settings)
    assert prediction.predicted_mb == 360 + 40 * 512 and prediction.allowed_mb == 19_500
    assert prediction.over
    budgeted = settings.model_copy(update={"memory_budget_mb": 6000.0})
    assert model.predict(budgeted) is None  # another budget: its own limit, not yet known


def meter_at_the_driver(settings: TrainSettings):
    """A stand-in for the CPU meter's line: 200 MiB + 20 an image, 100 more with Adam."""
    fixed = 300.0 if settings.optimizer == "adam" else 200.0
    return lambda batch: fixed + 20.0 * batch


RESNET50 = {"model": "resnet50", "batch_size": 64}


def test_on_a_gpu_a_group_with_one_batch_measured_is_the_meters_line_scaled_through_it():
    model = MemoryModel(probe=meter_at_the_driver, on_gpu=True)
    settings = TrainSettings.from_config(RESNET50)
    model.observe(settings, 16, 1.5 * (200 + 20 * 16), limit_mb=20_000.0)  # the card: 1.5x
    prediction = model.predict(settings)
    assert prediction.predicted_mb == pytest.approx(1.5 * (200 + 20 * 64))
    assert "scaled to a trial like it" in prediction.basis and not prediction.borrowed
    assert OomForecast(model).runs_out(settings.model_copy(update={"batch_size": 1024}))


def test_on_a_gpu_a_group_none_reported_borrows_the_largest_ratio_and_refuses_nothing():
    model = MemoryModel(probe=meter_at_the_driver, on_gpu=True)
    adam = TrainSettings.from_config({**RESNET50, "optimizer": "adam", "batch_size": 1024})
    assert model.predict(adam) is None  # no trial has reported: no limit, no ratio
    sgd = TrainSettings.from_config(RESNET50)
    model.observe(sgd, 16, 1.2 * (200 + 20 * 16), limit_mb=20_000.0)
    amp = sgd.model_copy(update={"amp": True})
    model.observe(amp, 32, 1.6 * (200 + 20 * 32), limit_mb=20_000.0)
    prediction = model.predict(adam)
    assert prediction.predicted_mb == pytest.approx(1.6 * (300 + 20 * 1024))
    assert prediction.borrowed and prediction.over  # 33 GB predicted, 20 GB allowed
    assert not OomForecast(model).runs_out(adam)  # another group's ratio refuses nothing


def test_on_a_gpu_two_batches_measured_are_the_groups_own_line_whatever_the_meter_says():
    model = MemoryModel(probe=meter_at_the_driver, on_gpu=True)
    settings = TrainSettings.from_config(RESNET50)
    for batch, peak in ((16, 1000.0), (64, 2920.0)):  # 360 + 40 MiB per image
        model.observe(settings, batch, peak, limit_mb=20_000.0)
    prediction = model.predict(settings.model_copy(update={"batch_size": 512}))
    assert prediction.predicted_mb == 360 + 40 * 512 and "measured peaks" in prediction.basis


def test_on_cpu_the_limit_is_the_budget_from_the_start():
    model = MemoryModel(probe=lambda settings: lambda batch: 10 + 0.5 * batch)
    settings = TrainSettings.from_config({"batch_size": 64, "memory_budget_mb": 40})
    assert model.predict(settings).allowed_mb == 40
    assert model.predict(settings.model_copy(update={"memory_budget_mb": None})) is None


def test_a_memory_model_saved_before_limits_were_learned_restores_as_a_cpu_one():
    import pickle

    model = MemoryModel(probe=None)
    state = dict(model.__dict__)
    del state["_on_gpu"], state["_limits"]
    old = MemoryModel.__new__(MemoryModel)
    old.__setstate__(pickle.loads(pickle.dumps(state)))
    settings = TrainSettings.from_config({"batch_size": 64, "memory_budget_mb": 40})
    assert old.limit_mb(settings) == 40
