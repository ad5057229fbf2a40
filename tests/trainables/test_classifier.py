import math
from pathlib import Path

import pytest
import torch

from trainables.classifier import fit_classifier
from trainables.data import PreparedData
from trainables.metrics import MACHINE_METRICS, METRICS, STATUS_OK
from trainables.settings import TrainSettings
from trainables.trial import choose_kernels
from trainables.trial_state import STATE_FILE, load_trial_state


class Reports:
    """Collects what a trial reports, and the state it saved with each report."""

    def __init__(self) -> None:
        self.metrics: list[dict] = []
        self.states: list[dict] = []

    def __call__(self, metrics: dict, checkpoint_dir: Path | None) -> None:
        self.metrics.append(metrics)
        if checkpoint_dir is None:  # an epoch between saves (`checkpoint_every`)
            self.states.append(None)
            return
        assert (checkpoint_dir / STATE_FILE).exists()
        self.states.append(load_trial_state(checkpoint_dir))


def same_results(metrics: dict, others: dict) -> bool:
    """Equal in everything but the machine's timings and memory."""
    keep = set(METRICS) - MACHINE_METRICS - {"node"}
    results = {name: metrics[name] for name in keep}
    return results == pytest.approx({name: others[name] for name in keep}, nan_ok=True)


def settings(**changes) -> TrainSettings:
    # The loop's logic, on the CPU on every machine: there a seed repeats exactly and the
    # meter holds the budget. The card's path: test_on_a_real_card.py and the fake card.
    base = {"epochs": 3, "batch_size": 8, "train_eval_size": 16, "optimizer": "sgd", "lr": 0.02,
            "device": "cpu"}  # fmt: skip
    return TrainSettings(**{**base, **changes})


def test_every_epoch_reports_every_metric_of_the_schema(tiny_data: PreparedData):
    reports = Reports()
    last = fit_classifier(settings(), tiny_data, reports)
    assert [m["epoch"] for m in reports.metrics] == [1, 2, 3]
    for metrics in reports.metrics:
        assert set(metrics) == set(METRICS) - {"node"}  # the Tune trainable adds where it ran
        assert metrics["status"] == STATUS_OK
        assert 0 <= metrics["val_acc"] <= 1 and metrics["throughput"] > 0
        assert metrics["effective_batch_size"] == metrics["physical_batch_size"] == 8
        assert metrics["peak_mem_mb"] > 0
    assert last == reports.metrics[-1]
    assert last["best_val_acc"] == max(m["val_acc"] for m in reports.metrics)


WANDERING = {"epochs": 6, "lr": 0.5}  # lr high: val wanders, the best epoch moves


def test_an_epochs_own_test_and_training_subset_scores_come_at_best_val_gap_epochs_and_the_last(
    tiny_data: PreparedData,
):
    reports = Reports()
    fit_classifier(settings(**WANDERING, gap_epochs=(2, 4)), tiny_data, reports)
    best_so_far, scored = -math.inf, []
    for metrics in reports.metrics:
        improved = metrics["val_acc"] > best_so_far
        best_so_far = max(best_so_far, metrics["val_acc"])
        expected = (improved and metrics["epoch"] in (2, 4)) or metrics["epoch"] == 6
        assert math.isfinite(metrics["test_acc"]) == expected, metrics["epoch"]
        assert math.isfinite(metrics["train_eval_acc"]) == expected, metrics["epoch"]
        scored.append(expected)
    assert scored.count(True) < 6, "every epoch was scored: the test shows nothing"


def test_the_gaps_at_gap_epochs_and_the_last_are_the_best_epochs_whose_scoring_waited(
    tiny_data: PreparedData,
):
    every_epoch, deferred = Reports(), Reports()
    fit_classifier(settings(**WANDERING, gap_epochs=range(1, 7)), tiny_data, every_epoch)
    fit_classifier(settings(**WANDERING, gap_epochs=(3,)), tiny_data, deferred)

    waited = 0
    for scored, late in zip(every_epoch.metrics, deferred.metrics, strict=True):
        assert late["val_acc"] == scored["val_acc"]  # the weights went back: same training
        assert late["best_epoch"] == scored["best_epoch"]
        if late["epoch"] in (3, 6):
            assert late["gen_gap"] == scored["gen_gap"], late["epoch"]
            assert late["val_test_gap"] == scored["val_test_gap"], late["epoch"]
            waited += late["best_epoch"] != late["epoch"]
        elif late["best_epoch"] > 3 or late["epoch"] < 3:  # a best epoch not yet scored
            assert math.isnan(late["gen_gap"]) and math.isnan(late["val_test_gap"])
    assert waited, "no best epoch waited for a gap epoch: the test shows nothing"
    assert same_results(deferred.metrics[-1], every_epoch.metrics[-1])


def test_with_every_epoch_a_gap_epoch_the_gap_is_that_of_the_best_epochs_own_scores(
    tiny_data: PreparedData,
):
    reports = Reports()
    fit_classifier(settings(**WANDERING, gap_epochs=range(1, 7)), tiny_data, reports)
    best = reports.metrics[-1]["best_epoch"]
    at_best = reports.metrics[best - 1]
    assert reports.metrics[-1]["gen_gap"] == max(
        0.0, at_best["train_eval_acc"] - at_best["test_acc"]
    )


def test_a_trial_resumed_while_its_best_epoch_waits_to_be_scored_ends_like_one_that_never_stopped(
    tiny_data: PreparedData,
):
    straight = Reports()
    fit_classifier(settings(gap_epochs=(2,)), tiny_data, straight)
    waiting = straight.states[0]  # epoch 1, the first best epoch, scored at 2 at the earliest
    assert "best_model" in waiting and math.isnan(waiting["state"]["progress"]["gen_gap"])

    resumed = Reports()
    fit_classifier(settings(gap_epochs=(2,)), tiny_data, resumed, resume_state=waiting)
    for after, never_stopped in zip(resumed.metrics, straight.metrics[1:], strict=True):
        assert same_results(after, never_stopped)


def test_adabatch_growth_shows_in_the_reported_batch_and_learning_rate(tiny_data: PreparedData):
    reports = Reports()
    fit_classifier(
        settings(epochs=4, adabatch_growth=2, adabatch_interval=2, max_batch_size=16),
        tiny_data,
        reports,
    )
    reported = [
        (m["physical_batch_size"], m["accumulation_steps"], m["effective_batch_size"], m["lr"])
        for m in reports.metrics
    ]
    assert reported == [(8, 1, 8, 0.02), (8, 1, 8, 0.02), (16, 1, 16, 0.04), (16, 1, 16, 0.04)]


def test_warmup_leaves_the_first_epoch_below_the_configured_learning_rate(tiny_data):
    reports = Reports()
    fit_classifier(settings(epochs=2, warmup_epochs=2), tiny_data, reports)
    assert reports.metrics[0]["lr"] < 0.02 * 0.6 and reports.metrics[1]["lr"] < 0.02


SWITCHES = {
    "plain": {},
    "amp, accumulation and AdaBatch growth across the stop": {
        "optimizer": "adam",
        "lr": 1e-3,
        "amp": True,
        "accumulation_steps": 2,
        "adabatch_growth": 2,
        "adabatch_interval": 1,
        "max_batch_size": 8,  # the growth after the stop goes through accumulation
        "warmup_epochs": 2,
        "augment": True,
        "activation_checkpointing": True,
    },
    "the noise-scale rule, growing at the stop": {
        "batch_size": 4,
        "adabatch_rule": "noise_scale",
        "adabatch_growth": 2,
    },
    "channels-last, augmented": {"channels_last": True, "augment": True},
}


@pytest.mark.parametrize("switches", SWITCHES.values(), ids=SWITCHES.keys())
def test_a_trial_resumed_from_its_checkpoint_ends_like_one_that_never_stopped(
    tiny_data: PreparedData, switches
):
    straight = Reports()
    fit_classifier(settings(**switches), tiny_data, straight)

    stopped = Reports()
    fit_classifier(settings(**{**switches, "epochs": 1}), tiny_data, stopped)
    resumed = Reports()
    fit_classifier(settings(**switches), tiny_data, resumed, resume_state=stopped.states[-1])

    assert [m["epoch"] for m in resumed.metrics] == [2, 3]
    for name in set(METRICS) - MACHINE_METRICS:
        assert resumed.metrics[-1][name] == pytest.approx(
            straight.metrics[-1][name], nan_ok=True
        ), name
    if "amp" in switches:
        last = straight.metrics[-1]  # grown x4 on a capped batch, then cut to the split
        assert (last["scheduled_batch_size"], last["physical_batch_size"]) == (64, 8)
        assert last["accumulation_steps"] == 6  # 48 training images


def test_a_trial_saving_every_other_epoch_resumes_from_its_last_save_exactly(tiny_data):
    straight = Reports()
    fit_classifier(settings(epochs=5, checkpoint_every=2), tiny_data, straight)
    saved = [state is not None for state in straight.states]
    assert saved == [False, True, False, True, True]  # every 2nd epoch, and the last
    resumed = Reports()
    fit_classifier(settings(epochs=5, checkpoint_every=2), tiny_data, resumed,
                   resume_state=straight.states[3])  # a retry after epoch 5 crashed  # fmt: skip
    assert [m["epoch"] for m in resumed.metrics] == [5]
    assert same_results(resumed.metrics[-1], straight.metrics[-1])


def test_time_to_target_is_infinite_when_the_target_is_out_of_reach(tiny_data: PreparedData):
    last = fit_classifier(settings(epochs=1, target_acc=1.0), tiny_data, Reports())
    assert math.isinf(last["time_to_target_s"]) or last["val_acc"] == 1.0
    assert math.isinf(last["steps_to_target"]) or last["val_acc"] == 1.0


def test_steps_to_target_counts_the_optimizer_steps_until_the_target_was_reached(tiny_data):
    reports = Reports()
    fit_classifier(settings(epochs=2, target_acc=0.01, accumulation_steps=2), tiny_data, reports)
    assert [m["train_steps"] for m in reports.metrics] == [3, 6]  # 48 images, 16 a step
    assert [m["steps_to_target"] for m in reports.metrics] == [3, 3]


@pytest.mark.parametrize(
    "switches", [{"accumulation_steps": 2}, {"noise_split_steps": 2},
                 {"adabatch_rule": "noise_scale", "adabatch_growth": 2}],
)  # fmt: skip
def test_every_epoch_reports_the_gradient_noise_scale_where_it_is_measured(
    tiny_data: PreparedData, switches
):
    """Accumulated steps are measured for free; without accumulation, split steps are
    trained in halves: asked for, or where the noise-scale rule needs them."""
    reports = Reports()
    fit_classifier(settings(**switches), tiny_data, reports)
    assert all(m["noise_scale"] > 0 for m in reports.metrics)  # NaN: not measured


def test_by_default_steps_without_accumulation_are_not_split_for_the_noise_scale(tiny_data):
    """A split step trains in two halves: a cost no trial pays unless something reads
    the noise scale."""
    last = fit_classifier(settings(), tiny_data, Reports())
    assert math.isnan(last["noise_scale"])


def test_the_noise_scale_rule_grows_the_batch_exactly_when_the_gradients_ask_for_it(tiny_data):
    reports = Reports()
    rule = {"adabatch_rule": "noise_scale", "adabatch_growth": 2, "batch_size": 4}
    fit_classifier(settings(epochs=5, **rule), tiny_data, reports)
    for before, after in zip(reports.metrics, reports.metrics[1:], strict=False):
        following = before["effective_batch_size"] * 2
        grows = following <= 48 and before["noise_scale"] >= following
        assert after["effective_batch_size"] == (following if grows else following // 2)
        assert after["lr"] == pytest.approx(before["lr"] * (2 if grows else 1))
    assert len({m["effective_batch_size"] for m in reports.metrics}) > 1  # it grew here


def test_deterministic_kernels_are_switched_per_trial_not_left_for_the_next_one(
    tiny_data: PreparedData,
):
    try:
        choose_kernels(TrainSettings(deterministic=True))
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.backends.cudnn.benchmark
        choose_kernels(TrainSettings(cudnn_benchmark=True))
        assert not torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.benchmark
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.benchmark = False


def test_the_data_stays_in_host_memory_and_its_size_is_reported_apart_from_the_step_peak(
    tiny_data: PreparedData,
):
    reports: list[dict] = []
    fit_classifier(TrainSettings(epochs=1, train_eval_size=16, device="cpu"), tiny_data,
                   lambda metrics, _: reports.append(metrics))  # fmt: skip
    splits = (tiny_data.train, tiny_data.val, tiny_data.test)
    split_bytes = sum(s.images.nbytes + s.labels.nbytes for s in splits)
    assert reports[0]["data_mb"] * (1 << 20) >= split_bytes  # plus the train-eval subset
    assert reports[0]["peak_mem_mb"] > 0


def test_no_step_is_larger_than_the_training_split_whatever_the_schedule_asks(
    tiny_data: PreparedData,
):
    """The main config's corner: batch 256 x accumulation 4, doubled every epoch."""
    reports: list[dict] = []
    grown = TrainSettings(epochs=3, batch_size=256, accumulation_steps=4, adabatch_growth=2,
                          train_eval_size=16, device="cpu")  # fmt: skip
    fit_classifier(grown, tiny_data, lambda metrics, _: reports.append(metrics))
    train_size = len(tiny_data.train)
    assert [m["scheduled_batch_size"] for m in reports] == [1024, 2048, 4096]
    assert all(m["effective_batch_size"] <= train_size for m in reports)
    # lr / batch stays as the schedule says: 48 images are used every epoch, so lr stays
    assert [m["lr"] for m in reports] == pytest.approx([0.01 * 48 / 1024] * 3)


@pytest.mark.parametrize(
    ("model", "old_names"),
    [
        ("small_cnn", {"": ""}),
        ("resnet18", {"conv1": "0.0", "bn1": "0.1", "layer1": "1", "layer2": "2",
                      "layer3": "3", "layer4": "4", "fc": "5.2"}),
    ],
)  # fmt: skip
def test_weights_saved_with_the_old_staged_keys_load_into_todays_models(model, old_names):
    from trainables.models import build_model
    from trainables.trial_state import renamed_from_staged

    today = build_model(model, num_classes=2, image_size=32).state_dict()

    def old_key(key: str) -> str:
        head, _, rest = key.partition(".")
        return f"stages.{old_names[head]}.{rest}" if head in old_names else f"stages.{key}"

    saved_then = {old_key(key): value for key, value in today.items()}
    assert all(key.startswith("stages.") for key in saved_then)
    renamed = renamed_from_staged(saved_then, model)
    assert list(renamed) == list(today)
    assert renamed_from_staged(today, model) is today


def test_the_evaluation_batches_timed_so_far_are_saved_with_every_checkpoint(tiny_data):
    reports = Reports()
    fit_classifier(settings(batch_size=16, epochs=2), tiny_data, reports)
    first, second = (state["state"]["eval_seconds_per_image"] for state in reports.states)
    # epoch 1 scores validation only, at the physical batch in the trial's layout
    assert set(first) == {(16, "contiguous")}
    # epoch 2, the last, times the other layout and then the half on its next splits
    assert set(second) == {(16, "contiguous"), (16, "channels_last"), (8, second_layout(second))}


def second_layout(timed: dict) -> str:
    return min(("contiguous", "channels_last"), key=lambda layout: timed[(16, layout)])
