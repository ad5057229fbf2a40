import math

import pytest

from trainables.metrics import (
    METRICS,
    NUMERIC_METRICS,
    OBJECTIVE_METRICS,
    EvalScores,
    Progress,
    error_sides,
    generalization_gap,
    min_accuracy_for,
    standard_error,
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


def test_a_gap_is_the_accuracies_difference_without_float_noise():
    """0.645 - 0.47 is 0.17500000000000004 in floats, and MLflow showed it so (2026-12-07)."""
    scores = EvalScores(train_eval_acc=0.645, val_acc=0.6, test_acc=0.47)
    assert generalization_gap(scores) == 0.175
    scored = Progress(best_val_acc=0.6, best_epoch=1).with_best_scored(0.645, 0.47)
    assert scored.gen_gap == 0.175 and scored.val_test_gap == 0.13


def test_an_unscored_gap_is_nan_not_zero():
    unscored = EvalScores(train_eval_acc=math.nan, val_acc=0.7, test_acc=math.nan)
    assert math.isnan(generalization_gap(unscored))


def test_a_time_to_target_of_an_untimed_configuration_stays_what_it_took_to_reach_it():
    """No speed timed (`train.speed_precision: 0`, or a configuration never timed before
    the target): the wall seconds up to the target's epoch, not those of every epoch."""
    from trainables.evaluation import epoch_metrics
    from trainables.schedules import EpochSchedule
    from trainables.speed import ConfigSpeed
    from trainables.training import EpochResult

    progress, reported = Progress(), []
    result = EpochResult(train_loss=1.0, train_acc=0.5, images=1000, optimizer_steps=10,
                         seconds=10.0, peak_mem_bytes=0, peak_reserved_bytes=0)  # fmt: skip
    for epoch, val in enumerate([0.5, 0.8, 0.85, 0.9], start=1):
        progress = progress.advance(epoch, scores(0.9, val, 0.8), 10.0, target_acc=0.75,
                                    steps=10, config="32x1", images=1000,
                                    train_seconds=10.0)  # fmt: skip
        metrics = epoch_metrics(
            epoch=epoch, result=result, scores=scores(0.9, val, 0.8), val_loss=1.0,
            progress=progress, schedule=EpochSchedule(32, 1, lr=0.1, growths=0), lr=0.1,
            data_bytes=0, speeds=ConfigSpeed(),
        )  # fmt: skip
        reported.append(metrics["time_to_target_s"])
    assert reported == [math.inf, 20.0, 20.0, 20.0]


def test_an_accuracy_of_one_on_a_few_images_is_not_read_as_exact():
    """Agresti and Coull's plus four: 40 of 40 right is known no better than to about 3
    points, and 0.8 of 400 as the plain binomial gives it."""
    sizes = {"val": 40, "test": 40, "train_eval": 40}
    perfect = standard_error("best_val_acc", {"best_val_acc": 1.0}, sizes)
    assert perfect == pytest.approx(math.sqrt((42 / 44) * (2 / 44) / 44))  # 0.031
    assert standard_error("best_val_acc", {"best_val_acc": 0.0}, sizes) == pytest.approx(perfect)
    usual = standard_error("val_acc", {"val_acc": 0.8}, {"val": 400})
    assert usual == pytest.approx(math.sqrt(0.8 * 0.2 / 400), rel=1e-3)


def test_a_speeds_errors_are_its_intervals_own_sides_and_a_times_are_them_turned_over():
    sizes = {"val": 400, "test": 400, "train_eval": 400}
    timed = {"throughput": 3437.0, "throughput_low": 2981.0, "throughput_high": 8130.0,
             "time_to_target_s": 20.0}  # fmt: skip
    below, above = error_sides("throughput", timed, sizes)
    assert (below, above) == pytest.approx(((3437 - 2981) / 1.959964, (8130 - 3437) / 1.959964))
    # a time is images over the speed: its lower bound from the upper speed
    time_below, time_above = error_sides("time_to_target_s", timed, sizes)
    assert time_below == pytest.approx(20 * (1 - 3437 / 8130) / 1.959964)
    assert time_above == pytest.approx(20 * (3437 / 2981 - 1) / 1.959964)
    # untimed, and any other metric: the one standard error on both sides
    untimed = {"throughput": 1000.0}
    assert error_sides("throughput", untimed, sizes) == (100.0, 100.0)
    accuracy = standard_error("best_val_acc", {"best_val_acc": 0.8}, sizes)
    assert error_sides("best_val_acc", {"best_val_acc": 0.8}, sizes) == (accuracy, accuracy)
