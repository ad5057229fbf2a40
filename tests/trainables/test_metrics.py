import math

import pytest

from trainables.metrics import (
    METRICS,
    NUMERIC_METRICS,
    OBJECTIVE_METRICS,
    EvalScores,
    Progress,
    generalization_gap,
    min_accuracy_for,
    throughput,
)


def scores(train_eval: float, val: float, test: float) -> EvalScores:
    return EvalScores(train_eval_acc=train_eval, val_acc=val, test_acc=test)


def test_the_schema_names_every_metric_of_the_design_once():
    assert set(METRICS) == {
        "epoch", "train_loss", "train_acc", "train_eval_acc", "val_acc", "val_loss",
        "test_acc", "best_val_acc", "best_epoch", "gen_gap", "val_test_gap", "throughput",
        "throughput_low", "throughput_high", "speed_outsiders", "speed_vs_baseline",
        "speed_vs_baseline_low", "speed_vs_baseline_high", "shared_throughput",
        "epoch_time_s", "train_time_s", "time_to_target_s", "train_steps", "steps_to_target",
        "noise_scale", "physical_batch_size", "accumulation_steps",
        "effective_batch_size", "scheduled_batch_size", "lr", "peak_mem_mb",
        "peak_reserved_mb", "memory_limit_mb", "card_mb", "card_context_mb", "data_mb",
        "skipped_steps", "status",
        "status_detail", "oom_cause", "node", "device_name", "driver_version",
        "torch_version", "cuda_version", "cudnn_version", "compile_s", "precision",
        "memory_format", "compile_mode", "matmul_precision",
    }  # fmt: skip
    assert not {"status", "status_detail", "oom_cause", "node"} & set(NUMERIC_METRICS)
    assert {"throughput", "best_val_acc", "gen_gap", "time_to_target_s", "steps_to_target"} <= set(
        OBJECTIVE_METRICS
    )


def test_throughput_is_images_per_second_and_zero_for_no_time():
    assert throughput(1000, 2.0) == 500.0
    assert throughput(1000, 0.0) == 0.0


def test_gaps_are_taken_at_the_best_validation_epoch_not_the_last():
    progress = Progress().advance(1, scores(0.9, 0.80, 0.70), 1.0, target_acc=0.99)
    progress = progress.advance(2, scores(0.99, 0.75, 0.60), 1.0, target_acc=0.99)
    assert progress.best_epoch == 1
    assert progress.best_val_acc == 0.80
    assert progress.gen_gap == pytest.approx(0.9 - 0.70)
    assert progress.val_test_gap == pytest.approx(0.10)


def test_a_model_that_does_worse_on_training_images_than_on_test_images_gets_no_credit():
    """An undertrained model at 0.55 with train_eval 0.52 must not beat a trained one
    whose gap is zero: a negative gap is not better generalization."""
    underfit = Progress().advance(1, scores(0.52, 0.55, 0.55), 1.0, target_acc=0.99)
    trained = Progress().advance(1, scores(0.85, 0.85, 0.85), 1.0, target_acc=0.99)
    assert underfit.gen_gap == 0.0 == trained.gen_gap
    overfit = Progress().advance(1, scores(0.95, 0.80, 0.80), 1.0, target_acc=0.99)
    assert overfit.gen_gap == pytest.approx(0.15)


def test_a_tie_in_validation_accuracy_keeps_the_earlier_epoch():
    progress = Progress().advance(1, scores(0.8, 0.7, 0.7), 1.0, target_acc=0.99)
    progress = progress.advance(2, scores(0.9, 0.7, 0.6), 1.0, target_acc=0.99)
    assert progress.best_epoch == 1


def test_time_to_target_counts_training_seconds_up_to_the_first_epoch_that_reaches_it():
    progress = Progress()
    for epoch, (val, seconds) in enumerate([(0.6, 2.0), (0.72, 3.0), (0.9, 4.0)], start=1):
        progress = progress.advance(epoch, scores(val, val, val), seconds, target_acc=0.7)
    assert progress.time_to_target_s == 5.0
    assert progress.train_seconds == 9.0


def test_time_to_target_is_infinite_when_the_target_is_never_reached():
    progress = Progress().advance(1, scores(0.6, 0.6, 0.6), 2.0, target_acc=0.7)
    assert math.isinf(progress.time_to_target_s)


@pytest.mark.parametrize(("classes", "floor"), [(2, 0.55), (3, 0.3833), (10, 0.15), (37, 0.077)])
def test_a_model_learned_something_only_five_points_above_chance(classes, floor):
    assert min_accuracy_for(classes) == pytest.approx(floor, abs=1e-3)


def test_a_best_epoch_not_yet_scored_has_no_gaps_until_its_weights_are():
    unscored = EvalScores(train_eval_acc=math.nan, val_acc=0.7, test_acc=math.nan)
    waiting = Progress().advance(1, unscored, epoch_seconds=1.0, target_acc=0.9)
    assert waiting.gap_pending and math.isnan(waiting.gen_gap)
    scored = waiting.with_best_scored(train_eval_acc=0.8, test_acc=0.65)
    assert not scored.gap_pending
    assert scored.gen_gap == pytest.approx(0.15) and scored.val_test_gap == pytest.approx(0.05)


def test_an_unscored_gap_is_nan_not_zero():
    unscored = EvalScores(train_eval_acc=math.nan, val_acc=0.7, test_acc=math.nan)
    assert math.isnan(generalization_gap(unscored))
