import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainables.noise_scale import (
    NoiseMeter,
    NoiseScale,
    in_halves,
    spread_steps,
    unbiased_estimates,
)
from trainables.precision import Precision
from trainables.settings import DEFAULT_NOISE_SPLITS
from trainables.step import train_step
from trainables.training import with_noise_splits

EXAMPLES, FEATURES, CLASSES = 4096, 20, 3


@pytest.fixture(scope="module")
def problem() -> tuple[nn.Linear, torch.Tensor, torch.Tensor, float]:
    """A softmax regression, its data, and its exact noise scale from per-example gradients."""
    torch.manual_seed(0)
    inputs = torch.randn(EXAMPLES, FEATURES)
    labels = (inputs @ torch.randn(FEATURES, CLASSES) + 2 * torch.randn(EXAMPLES, CLASSES)).argmax(
        1
    )
    model = nn.Linear(FEATURES, CLASSES)
    with torch.no_grad():  # per-example gradients of cross-entropy: (p - y) x and (p - y)
        error = F.softmax(model(inputs), dim=1) - F.one_hot(labels, CLASSES).float()
        per_example = torch.cat([(error[:, :, None] * inputs[:, None, :]).flatten(1), error], 1)
    mean = per_example.mean(0)
    noise_trace = (per_example - mean).pow(2).sum(1).mean()
    return model, inputs, labels, float(noise_trace / mean.pow(2).sum())


def measure(problem, micro_sizes: list[int], precision: Precision, steps: int = 1500) -> float:
    model, inputs, labels, _ = problem
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    meter = NoiseMeter(model)
    draws = torch.Generator().manual_seed(1)
    images = sum(micro_sizes)
    for _ in range(steps):  # drawn with replacement: the i.i.d. batches the estimator assumes
        picked = torch.randint(0, EXAMPLES, (images,), generator=draws).split(micro_sizes)
        micro_batches = [(inputs[i], labels[i]) for i in picked]
        train_step(model, optimizer, micro_batches, precision, images=images, update=False,
                   noise=meter)  # fmt: skip
    return meter.result().value


@pytest.mark.parametrize("micro_sizes", [[16, 16, 16, 16], [8, 24, 32]])
def test_the_measured_noise_scale_matches_the_exact_one_from_per_example_gradients(
    problem, micro_sizes
):
    exact = problem[3]
    assert measure(problem, micro_sizes, Precision("cpu", None)) == pytest.approx(exact, rel=0.08)


def test_a_grad_scaler_s_loss_scale_is_taken_out_of_the_gradients(problem):
    plain = measure(problem, [16, 16], Precision("cpu", None), steps=200)
    scaled = measure(problem, [16, 16], Precision("cpu", None, torch.amp.GradScaler("cpu")), 200)
    assert scaled == pytest.approx(plain, rel=1e-4)


def test_measuring_leaves_no_hook_on_the_model_and_leaves_the_update_alone(problem):
    model, inputs, labels, _ = problem
    batches = [(inputs[:16], labels[:16]), (inputs[16:32], labels[16:32])]

    def trained(noise: bool) -> torch.Tensor:
        copy = nn.Linear(FEATURES, CLASSES)
        copy.load_state_dict(model.state_dict())
        optimizer = torch.optim.SGD(copy.parameters(), lr=0.1)
        meter = NoiseMeter(copy) if noise else None
        train_step(copy, optimizer, batches, Precision("cpu", None), images=32, noise=meter)
        assert all(not p._backward_hooks for p in copy.parameters())
        return copy.weight.detach().clone()

    assert torch.equal(trained(noise=True), trained(noise=False))


def test_the_estimates_are_the_papers_two_batch_size_formulas():
    # E|G_b|² = |G|² + tr(Σ)/b with |G|² = 2 and tr(Σ) = 64: at b = 8 and B = 32
    gradient_sq, noise_trace = unbiased_estimates(2 + 64 / 8, 2 + 64 / 32, 8, 32)
    assert gradient_sq == pytest.approx(2) and noise_trace == pytest.approx(64)


def test_a_noise_scale_is_nan_unmeasured_and_inf_when_the_signal_is_lost_in_the_noise():
    assert math.isnan(NoiseScale().value)
    assert NoiseScale(gradient_sq=-0.1, noise_trace=5.0, steps=3).value == math.inf
    assert NoiseScale(gradient_sq=2.0, noise_trace=64.0, steps=3).value == 32.0


def test_split_steps_are_spread_over_the_epoch_and_a_batch_splits_into_two_halves():
    assert spread_steps(100, 4) == [12, 37, 62, 87]
    assert spread_steps(3, 4) == [0, 1, 2]
    assert in_halves(slice(0, 9)) == [slice(0, 4), slice(4, 9)]
    assert in_halves(slice(5, 8)) == [slice(5, 8)]  # halves of one image cannot train BatchNorm


def test_a_few_accumulated_steps_are_measured_as_they_train_and_plain_ones_only_where_split():
    """The meter's hooks cost an epoch of the small CNN measured whole 5-12% on a CPU: a few
    steps an epoch give the noise scale, not all of them."""
    plain = [[slice(i, i + 8)] for i in range(0, 80, 8)]
    groups, measured = with_noise_splits(plain, splits=2)
    assert measured == {3, 7}  # spread over the steps after the first
    assert groups[3] == [slice(24, 28), slice(28, 32)] and groups[2] == plain[2]
    assert with_noise_splits(plain, splits=0) == (plain, set())
    accumulated = [[slice(i, i + 4), slice(i + 4, i + 8)] for i in range(0, 160, 8)]
    assert with_noise_splits(accumulated, splits=2) == (accumulated, {5, 15})
    # none asked: DEFAULT_NOISE_SPLITS of them, never the first, at most half of the rest
    # (the others time the config's speed), never a last lone micro-batch
    short = [[slice(i, i + 4), slice(i + 4, i + 8)] for i in range(0, 40, 8)] + [[slice(40, 44)]]
    assert with_noise_splits(short, splits=0) == (short, {2, 4})
    assert with_noise_splits(short[:3], splits=0) == (short[:3], {2})
    assert with_noise_splits(short[:2], splits=0) == (short[:2], set())
    _, by_default = with_noise_splits(accumulated, splits=0)
    assert len(by_default) == DEFAULT_NOISE_SPLITS and 0 not in by_default


def test_the_first_step_of_an_epoch_always_trains_the_whole_physical_batch():
    """It sets `peak_mem_mb` and is where a batch too large fails first: a split step's half
    would measure half the step and let a trial of few steps never run a full one."""
    for steps in (1, 2, 4, 5):
        plain = [[slice(i, i + 8)] for i in range(0, 8 * steps, 8)]
        groups, measured = with_noise_splits(plain, splits=4)
        assert groups[0] == plain[0] and 0 not in measured
        assert measured == set(range(1, steps))  # the rest, when there are few
