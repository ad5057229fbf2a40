import pytest
import torch

from trainables.memory import optimizer_state_bytes
from trainables.optimizers import OPTIMIZERS
from trainables.settings import TrainSettings
from trainables.trial import build_optimizer


def a_step(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> None:
    model(torch.randn(4, 3)).square().sum().backward()
    optimizer.step()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_each_optimizers_state_is_what_the_memory_model_counts_before_its_first_step(name):
    model = torch.nn.Linear(3, 5)
    settings = TrainSettings(optimizer=name)
    optimizer = build_optimizer(settings, model.parameters())
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    expected = OPTIMIZERS[name].state_buffers(settings.momentum) * parameter_bytes
    assert optimizer_state_bytes(optimizer) == expected  # predicted
    a_step(optimizer, model)
    assert optimizer_state_bytes(optimizer) == expected  # measured


def test_sgd_without_momentum_keeps_no_state():
    assert OPTIMIZERS["sgd"].state_buffers(0.0) == 0


@pytest.mark.parametrize(
    ("name", "kind", "options"),
    [
        ("sgd", torch.optim.SGD, {"nesterov": False, "momentum": 0.9}),
        ("sgd_nesterov", torch.optim.SGD, {"nesterov": True, "momentum": 0.9}),
        ("adam", torch.optim.Adam, {"decoupled_weight_decay": False}),
        ("adamw", torch.optim.AdamW, {"decoupled_weight_decay": True}),
    ],
)
def test_each_name_builds_the_optimizer_users_expect(name, kind, options):
    optimizer = build_optimizer(TrainSettings(optimizer=name), torch.nn.Linear(2, 2).parameters())
    assert type(optimizer) is kind
    group = optimizer.param_groups[0]
    assert {key: group[key] for key in options} == options
    assert group["lr"] == OPTIMIZERS[name].default_lr


def test_nesterov_without_momentum_is_refused():
    with pytest.raises(ValueError, match="needs momentum > 0"):
        TrainSettings(optimizer="sgd_nesterov", momentum=0.0)


def test_an_unknown_optimizer_is_refused_listing_the_table():
    with pytest.raises(ValueError, match="'sgd', 'sgd_nesterov', 'adam' or 'adamw'"):
        TrainSettings(optimizer="lamb")


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_can_update_all_parameters_in_one_fused_kernel(name):
    """As a trial on CUDA builds it; under a GradScaler a fused step never waits for the
    device to learn whether the gradients overflowed."""
    model = torch.nn.Linear(3, 2)
    fused = build_optimizer(TrainSettings(optimizer=name), model.parameters(), fused=True)
    plain = build_optimizer(TrainSettings(optimizer=name), model.parameters())
    assert fused.defaults["fused"] is True and not plain.defaults["fused"]
