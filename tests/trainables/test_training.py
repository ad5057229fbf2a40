import contextlib
import copy
import math

import pytest
import torch

from trainables.memory import MemoryBudget
from trainables.models import build_model
from trainables.noise_scale import NoiseMeter
from trainables.precision import Precision, precision_for
from trainables.schedules import EpochSchedule
from trainables.settings import DEFAULT_NOISE_SPLITS, TrainSettings
from trainables.step import train_step
from trainables.training import (
    DIVERGED_AFTER_SKIPPED_STEPS,
    EpochSteps,
    HostSplit,
    Normaliser,
    SkippedSteps,
    batch_slices,
    device_batches,
    evaluate,
    meter_first_step,
    step_groups,
    train_epoch,
)
from trainables.trial import build_optimizer

CPU = torch.device("cpu")
FP32 = Precision("cpu", None)
NORMALISE = Normaliser.from_stats((0.5, 0.5, 0.5), (0.25, 0.25, 0.25), CPU)


def split_of(images: int = 64, size: int = 16) -> HostSplit:
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 2, (images,), generator=generator)
    # Brightness tells the classes apart, so a few steps must learn it.
    noise = torch.randint(0, 100, (images, 3, size, size), generator=generator)
    pixels = noise + 120 * labels.view(-1, 1, 1, 1)
    return HostSplit(pixels.to(torch.uint8), labels)


def schedule(batch_size: int, accumulation_steps: int = 1, lr: float = 0.01) -> EpochSchedule:
    return EpochSchedule(
        batch_size=batch_size, accumulation_steps=accumulation_steps, lr=lr, growths=0
    )


def one_epoch(
    model, optimizer, split, batch_size, accumulation_steps=1, seed=0, noise_splits=0, **switches
):
    """An epoch as a trial trains it: its steps drawn, the CPU meter's check, the loop."""
    generator = torch.Generator().manual_seed(seed)
    steps = EpochSteps.drawn(len(split), schedule(batch_size, accumulation_steps), generator,
                             noise_splits)  # fmt: skip
    budget = switches.pop("budget", None) or MemoryBudget(CPU)
    precision = switches.pop("precision", FP32)
    metered = meter_first_step(budget, model, optimizer, split, NORMALISE, steps, precision)
    noise = NoiseMeter(model) if steps.measured else None
    return train_epoch(model, optimizer, split, NORMALISE, steps, precision=precision,
                       generator=generator, budget=budget, metered=metered, noise=noise,
                       **switches)  # fmt: skip


SKIPPED, APPLIED = torch.tensor(True), torch.tensor(False)  # as a GradScaler's step says


def test_a_run_of_skipped_steps_long_enough_says_the_trial_diverged():
    skipped = SkippedSteps(streak=DIVERGED_AFTER_SKIPPED_STEPS - 2)  # carried over
    skipped.after(SKIPPED)
    assert not skipped.diverged and skipped.count == 1
    skipped.after(APPLIED)
    assert skipped.streak == 0 and skipped.count == 1  # an applied step ends the run
    for _ in range(DIVERGED_AFTER_SKIPPED_STEPS):
        skipped.after(SKIPPED)
    assert skipped.diverged and skipped.count == 1 + DIVERGED_AFTER_SKIPPED_STEPS
    skipped.after(None)  # a step without a scaler cannot skip
    assert skipped.streak == 0


def test_a_long_run_of_skipped_steps_that_ends_between_two_readings_still_counts():
    skipped = SkippedSteps()
    for _ in range(DIVERGED_AFTER_SKIPPED_STEPS):
        skipped.after(SKIPPED)
    skipped.after(APPLIED)  # the run is over by the time it is read
    assert skipped.streak == 0 and skipped.diverged


def test_an_epochs_steps_cover_the_split_once_in_the_drawn_order_first_step_whole():
    steps = EpochSteps.drawn(40, schedule(8), torch.Generator().manual_seed(3), noise_splits=2)
    drawn = torch.cat([batch for group in steps.batches for batch in group])
    assert sorted(drawn.tolist()) == list(range(40))
    assert len(steps.first_batch) == 8 and 0 not in steps.measured and len(steps.measured) == 2


def test_batches_cover_every_item_once_and_keep_a_partial_last_batch():
    slices = batch_slices(10, 4)
    assert [(s.start, s.stop) for s in slices] == [(0, 4), (4, 8), (8, 10)]


def test_a_last_batch_of_one_image_is_left_out_because_batchnorm_cannot_train_on_it():
    assert [(s.start, s.stop) for s in batch_slices(9, 4)] == [(0, 4), (4, 8)]
    assert [(s.start, s.stop) for s in batch_slices(1, 4)] == [(0, 1)]


def test_micro_batches_are_grouped_into_steps_and_a_partial_last_group_is_kept():
    groups = step_groups(22, 4, 3)
    assert [len(g) for g in groups] == [3, 3]
    assert groups[-1][-1] == slice(20, 22)


def test_normalising_maps_uint8_to_zero_mean_unit_std_by_the_given_stats():
    pixels = torch.tensor([0, 127.5, 255]).view(1, 3, 1, 1).round().to(torch.uint8)
    normalised = NORMALISE(pixels).flatten()
    assert torch.allclose(normalised, torch.tensor([-2.0, 0.0, 2.0]), atol=0.01)


class StepsSeen:
    """A speed window that notes each step's images and whether it may be timed."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, bool]] = []

    @contextlib.contextmanager
    def step(self):
        yield

    def after(self, images: int, timed: bool = True) -> None:
        self.seen.append((images, timed))

    def close(self) -> None:
        pass


def test_the_steps_the_noise_scale_is_measured_on_are_not_timed_as_the_configurations_speed():
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = build_optimizer(TrainSettings(), model.parameters())
    window = StepsSeen()
    one_epoch(model, optimizer, split_of(images=128), 4, accumulation_steps=2, window=window)
    untimed = [step for step, (_, timed) in enumerate(window.seen) if not timed]
    assert len(window.seen) == 16 and len(untimed) == DEFAULT_NOISE_SPLITS and 0 not in untimed


def test_an_epoch_of_training_learns_an_easy_task_and_reports_what_it_saw():
    torch.manual_seed(0)
    split = split_of()
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = build_optimizer(TrainSettings(optimizer="adam", lr=1e-3), model.parameters())
    _, loss_before = evaluate(model, split, NORMALISE, batch_size=32)
    for epoch in range(3):
        result = one_epoch(model, optimizer, split, batch_size=16, seed=epoch)
    after, loss = evaluate(model, split, NORMALISE, batch_size=32)
    assert result.images == 64 and result.optimizer_steps == 4 and result.seconds > 0
    assert after >= 0.9
    assert loss < loss_before / 2


@pytest.mark.parametrize(("micro", "steps", "images"), [(8, 4, 64), (8, 3, 60), (6, 4, 64)])
def test_k_micro_batches_of_b_give_the_update_of_one_batch_of_k_times_b(micro, steps, images):
    """For a model without batch-dependent layers, including a partial last group and a
    partial last micro-batch, which are weighted by the images they hold."""
    split = split_of(images=images)
    torch.manual_seed(0)
    accumulated = build_model("small_cnn", num_classes=2, image_size=16)
    whole = copy.deepcopy(accumulated)
    for model, batch, accumulation in ((accumulated, micro, steps), (whole, micro * steps, 1)):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        one_epoch(model, optimizer, split, batch, accumulation)
    for a, b in zip(accumulated.parameters(), whole.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), "accumulated steps drifted from whole batches"


def test_accumulation_does_not_change_the_learning_rate():
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    one_epoch(model, optimizer, split_of(), 8, 4)
    assert optimizer.param_groups[0]["lr"] == 0.05


def test_the_learning_rate_schedule_is_applied_before_every_optimizer_step():
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    seen = []

    def lr_at(fraction: float) -> float:
        seen.append(fraction)
        return 0.01 * (1 + fraction)

    one_epoch(model, optimizer, split_of(), 16, lr_at=lr_at)
    assert seen == [0.0, 0.25, 0.5, 0.75]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0175)


def test_a_non_finite_loss_shows_in_the_epochs_train_loss():
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e12)  # blows up within a step or two
    result = one_epoch(model, optimizer, split_of(), 8)
    assert not torch.isfinite(torch.tensor(result.train_loss))


def test_bf16_autocast_and_augmentation_train_on_cpu():
    torch.manual_seed(0)
    split = split_of()
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = build_optimizer(TrainSettings(optimizer="adam", lr=1e-3), model.parameters())
    bf16 = precision_for(True, "float16", CPU)
    assert bf16.dtype == torch.bfloat16 and bf16.scaler is None
    for epoch in range(3):
        result = one_epoch(model, optimizer, split, 16, seed=epoch, precision=bf16, augment=True)
    assert result.images == 64
    assert evaluate(model, split, NORMALISE, batch_size=32, precision=bf16)[0] >= 0.8


def test_the_cpu_meter_grows_with_the_physical_batch_and_counts_state_before_activations():
    split = split_of(images=256)
    peaks = {}
    for batch_size in (8, 128):
        torch.manual_seed(0)
        model = build_model("small_cnn", num_classes=2, image_size=16)
        optimizer = build_optimizer(TrainSettings(optimizer="adam"), model.parameters())
        peaks[batch_size] = one_epoch(model, optimizer, split, batch_size).peak_mem_bytes
        params = sum(p.numel() * 4 for p in model.parameters())
        assert peaks[batch_size] > 4 * params  # parameters, gradients, Adam's two moments
    assert peaks[128] > peaks[8] + 500_000  # the activations of 120 more images


def test_batches_gathered_ahead_on_a_helper_thread_are_the_same_batches_in_the_same_order():
    split = split_of(images=40)
    batches = [torch.randperm(40)[:8] for _ in range(5)]
    direct = list(device_batches(split, batches, CPU, ahead=False))
    ahead = list(device_batches(split, iter(batches), CPU, ahead=True))
    assert len(direct) == len(ahead) == 5
    for (images, labels), (images_ahead, labels_ahead) in zip(direct, ahead, strict=True):
        assert torch.equal(images, images_ahead) and torch.equal(labels, labels_ahead)


def test_a_step_the_grad_scaler_skips_leaves_the_weights_and_the_epochs_loss_alone():
    from torch.amp import GradScaler

    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaled = Precision("cpu", None, GradScaler("cpu"))
    before = [p.detach().clone() for p in model.parameters()]
    inputs = torch.full((4, 3, 16, 16), math.inf), torch.zeros(4, dtype=torch.long)
    outcome = train_step(model, optimizer, [inputs], scaled, images=4)
    assert outcome.updated and bool(outcome.skipped)  # told on the device, read here
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before, strict=True))
