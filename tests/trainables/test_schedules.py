import math

import pytest

from trainables.schedules import (
    EpochSchedule,
    epoch_schedule,
    grows_by_noise,
    growths_by,
    warmup_factor,
)


def schedule_at(epoch: int, **settings) -> EpochSchedule:
    base = {"batch_size": 32, "accumulation_steps": 1, "lr": 0.1}
    return epoch_schedule(epoch, **{**base, **settings})


def test_without_growth_every_epoch_has_the_configured_batch_and_lr():
    for epoch in range(1, 10):
        schedule = schedule_at(epoch, batch_size=64, accumulation_steps=2)
        assert (schedule.batch_size, schedule.accumulation_steps, schedule.lr) == (64, 2, 0.1)
        assert schedule.effective_batch_size == 128


def test_the_batch_grows_by_beta_at_the_start_of_every_interval():
    sizes = [schedule_at(epoch, growth=2, interval=3).batch_size for epoch in range(1, 11)]
    assert sizes == [32, 32, 32, 64, 64, 64, 128, 128, 128, 256]
    assert [growths_by(epoch, 2, 3) for epoch in (1, 3, 4, 7, 10)] == [0, 0, 1, 2, 3]


@pytest.mark.parametrize("beta", [2, 4, 8])
def test_the_papers_rule_keeps_lr_over_the_effective_batch_constant(beta):
    settings = {"batch_size": 16, "accumulation_steps": 2, "lr": 0.05, "growth": beta}
    start = schedule_at(1, **settings, interval=2)
    for epoch in range(1, 9):
        schedule = schedule_at(epoch, **settings, interval=2)
        ratio = schedule.lr / schedule.effective_batch_size
        assert ratio == pytest.approx(start.lr / start.effective_batch_size)


def test_an_extra_decay_multiplies_lr_over_batch_once_per_growth_like_the_papers_runs():
    # CIFAR-100: double the batch and halve the learning rate every 20 epochs.
    cifar = {"batch_size": 128, "growth": 2, "interval": 20, "lr_decay": 0.25}
    before, after = schedule_at(20, **cifar), schedule_at(21, **cifar)
    assert (before.batch_size, before.lr) == (128, 0.1)
    assert (after.batch_size, after.lr) == (256, pytest.approx(0.05))
    # ImageNet, figure 3: batch x2 / x4 / x8 with lr x0.2 / x0.4 / x0.8 every 30 epochs.
    for beta, lr_factor in ((2, 0.2), (4, 0.4), (8, 0.8)):
        grown = schedule_at(31, batch_size=256, growth=beta, interval=30, lr_decay=0.1)
        assert grown.lr == pytest.approx(0.1 * lr_factor)


def test_beyond_the_capacity_growth_continues_through_accumulation_at_the_same_effective_batch():
    schedules = [
        schedule_at(e, batch_size=64, growth=2, interval=1, capacity=128) for e in (1, 2, 3, 4)
    ]
    assert [(p.batch_size, p.accumulation_steps) for p in schedules] == [
        (64, 1),
        (128, 1),
        (128, 2),
        (128, 4),
    ]
    assert [p.effective_batch_size for p in schedules] == [64, 128, 256, 512]
    assert [p.lr for p in schedules] == pytest.approx([0.1, 0.2, 0.4, 0.8])


def test_a_capacity_that_does_not_divide_the_batch_rounds_the_micro_batch_up():
    schedule = schedule_at(1, batch_size=100, capacity=64)
    assert (schedule.batch_size, schedule.accumulation_steps) == (50, 2)
    odd = schedule_at(1, batch_size=99, capacity=64)
    assert (odd.batch_size, odd.accumulation_steps) == (50, 2)


def test_warmup_ramps_linearly_from_the_start_factor_to_one_then_stays():
    assert warmup_factor(0.0, 5, 0.1) == pytest.approx(0.1)
    assert warmup_factor(2.5, 5, 0.1) == pytest.approx(0.55)
    assert warmup_factor(5.0, 5, 0.1) == 1.0
    assert warmup_factor(9.0, 5, 0.1) == 1.0
    assert warmup_factor(0.0, 0, 0.1) == 1.0


def reference_accumulation_schedule(
    epochs: int, micro: int, accumulation: int, lr: float, beta: int, interval: int,
    gamma: float, split: int,
) -> list[tuple[int, int, float]]:  # fmt: skip
    """(micro-batch, accumulation, lr) per epoch as NVlabs/AdaBatch's adabatch_cifar.py runs
    its accumulation path: after every `interval` epochs the accumulation is multiplied by
    beta; where micro x accumulation would pass the training set it is cut to
    floor(len(trainset) / micro), and lr is multiplied by gamma x (achieved / asked)."""
    schedules = []
    for epoch in range(epochs):
        schedules.append((micro, accumulation, lr))
        if (epoch + 1) % interval == 0:
            additional_decay = 1.0
            accumulation *= beta
            if accumulation * micro > split:
                asked = accumulation * micro
                accumulation = split // micro
                additional_decay = accumulation * micro / asked
            lr *= gamma * additional_decay
    return schedules


@pytest.mark.parametrize("split", [10_000, 1_200, 1_000])  # never caps; caps at 1200; odd
@pytest.mark.parametrize("lr_decay", [1.0, 0.25])
@pytest.mark.parametrize("interval", [1, 2, 3])
@pytest.mark.parametrize("beta", [2, 4, 8])
def test_growth_through_accumulation_follows_the_reference_implementation_at_the_split(
    beta, interval, lr_decay, split
):
    # capacity = the micro-batch: growth goes to accumulation, the reference's path.
    expected = reference_accumulation_schedule(
        9, micro=64, accumulation=2, lr=0.1, beta=beta, interval=interval,
        gamma=beta * lr_decay, split=split,
    )  # fmt: skip
    for epoch, (micro, accumulation, lr) in enumerate(expected, start=1):
        schedule = schedule_at(
            epoch, batch_size=64, accumulation_steps=2, growth=beta, interval=interval,
            lr_decay=lr_decay, capacity=64, train_size=split,
        )  # fmt: skip
        assert (schedule.batch_size, schedule.accumulation_steps) == (micro, accumulation), epoch
        assert schedule.lr == pytest.approx(lr), epoch
        assert schedule.scheduled_batch_size == 128 * beta ** ((epoch - 1) // interval)


@pytest.mark.parametrize("split", [1_200, 1_000, 100])
@pytest.mark.parametrize("beta", [2, 4, 8])
def test_a_growing_physical_batch_never_passes_the_split_and_lr_follows_the_batch_used(beta, split):
    for epoch in range(1, 10):
        schedule = schedule_at(epoch, batch_size=256, accumulation_steps=4, growth=beta, interval=2,
                       train_size=split)  # fmt: skip
        asked = 1024 * beta ** ((epoch - 1) // 2)
        used = schedule.effective_batch_size
        assert schedule.scheduled_batch_size == asked
        assert used <= split and schedule.batch_size <= split
        if asked <= split:
            assert used == asked
        else:  # the largest whole number of micro-batches that fits in the split
            assert split - schedule.batch_size < used
        assert schedule.lr == pytest.approx(0.1 * beta ** ((epoch - 1) // 2) * used / asked)


def test_the_noise_rule_grows_once_the_noise_scale_reaches_the_next_batch_that_fits_the_split():
    assert grows_by_noise(64.0, 32, growth=2, train_size=1200)
    assert not grows_by_noise(63.9, 32, growth=2, train_size=1200)
    assert grows_by_noise(math.inf, 32, growth=4, train_size=1200)  # signal lost in the noise
    assert not grows_by_noise(math.nan, 32, growth=2, train_size=1200)  # not measured
    assert not grows_by_noise(5000.0, 1024, growth=2, train_size=1200)  # 2048 > the split
    assert not grows_by_noise(5000.0, 32, growth=1, train_size=1200)  # AdaBatch off


def test_a_plan_given_its_growths_ignores_the_interval():
    schedule = epoch_schedule(2, batch_size=32, accumulation_steps=1, lr=0.01, growth=2, interval=9,
                      lr_decay=0.5, growths=2)  # fmt: skip
    assert (schedule.effective_batch_size, schedule.growths) == (128, 2)
    assert schedule.lr == pytest.approx(0.01 * 4 * 0.25)
