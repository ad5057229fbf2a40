import pytest
import torch

from trainables.memory import activation_bytes, optimizer_state_bytes, step_peak_bytes
from trainables.models import build_model
from trainables.precision import precision_for

CPU = torch.device("cpu")


def resnet18_step_peak(amp: bool = False, checkpointing: bool = False, batch: int = 64) -> int:
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=2, image_size=64)
    if checkpointing:
        model.enable_checkpointing()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    inputs, targets = torch.randn(batch, 3, 64, 64), torch.randint(0, 2, (batch,))
    return step_peak_bytes(model, optimizer, inputs, targets, precision_for(amp, "float16", CPU))


def test_checkpointing_lowers_the_metered_peak_of_resnet18_at_the_same_batch():
    assert resnet18_step_peak(checkpointing=True) < 0.85 * resnet18_step_peak()


def test_bf16_autocast_lowers_the_metered_peak_of_resnet18_at_the_same_batch():
    assert resnet18_step_peak(amp=True) < 0.9 * resnet18_step_peak()


def test_both_together_are_lower_than_either():
    both = resnet18_step_peak(amp=True, checkpointing=True)
    assert both < resnet18_step_peak(amp=True) and both < resnet18_step_peak(checkpointing=True)


@pytest.mark.parametrize(
    ("make", "buffers"),
    [
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 1),
        (lambda p: torch.optim.SGD(p, lr=0.1), 0),
        (lambda p: torch.optim.Adam(p), 2),
    ],
)
def test_optimizer_state_is_predicted_before_the_first_step_and_measured_after(make, buffers):
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = make(model.parameters())
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    predicted = optimizer_state_bytes(optimizer)
    model(torch.randn(4, 3, 16, 16)).sum().backward()
    optimizer.step()
    assert predicted == buffers * param_bytes
    assert optimizer_state_bytes(optimizer) == predicted


def test_measuring_does_not_change_batchnorm_statistics_or_leave_gradients():
    model = build_model("resnet18", num_classes=2, image_size=32)
    before = {name: b.clone() for name, b in model.named_buffers()}
    activation_bytes(model, torch.randn(8, 3, 32, 32), torch.randint(0, 2, (8,)),
                     precision_for(False, "float16", CPU))  # fmt: skip
    for name, buffer in model.named_buffers():
        assert torch.equal(buffer, before[name]), name
    assert all(p.grad is None for p in model.parameters())
