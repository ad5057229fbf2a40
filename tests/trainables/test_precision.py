import pytest
import torch

from trainables.precision import precision_for


def test_amp_off_is_plain_fp32_everywhere():
    for device in ("cpu", "cuda"):
        precision = precision_for(False, "float16", torch.device(device))
        assert precision.dtype is None and precision.scaler is None and precision.name == "fp32"


def test_amp_on_cpu_is_bf16_autocast_without_a_scaler():
    precision = precision_for(True, "float16", torch.device("cpu"))
    assert precision.dtype is torch.bfloat16 and precision.scaler is None
    with precision.autocast():
        out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype is torch.bfloat16


@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled")
def test_amp_on_cuda_is_fp16_with_a_grad_scaler_whose_state_is_kept(fake_cuda):
    fake_cuda.cards[0].major = 7  # a V100: no bfloat16
    with pytest.warns(UserWarning, match="no native bfloat16: the trial runs float16"):
        precision = precision_for(True, "bfloat16", torch.device("cuda"))
    assert precision.dtype is torch.float16 and precision.scaler is not None
    assert isinstance(precision.state_dict(), dict)


def test_bf16_on_a_cuda_device_that_supports_it_needs_no_scaler(fake_cuda):
    precision = precision_for(True, "bfloat16", torch.device("cuda"))
    assert precision.dtype is torch.bfloat16 and precision.scaler is None


def one_update(precision, gradient: torch.Tensor) -> torch.Tensor:
    """What one SGD step at lr 1 changes a weight by, its gradient `gradient` (passed
    through the precision's backward, so scaled where it scales)."""
    weight = torch.nn.Parameter(torch.zeros_like(gradient))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    precision.backward((weight * gradient).sum())
    precision.step(optimizer, [weight])
    return -weight.detach()


def test_clipping_scales_the_update_down_to_the_norm_and_leaves_a_small_one_alone():
    precision = precision_for(False, "float16", torch.device("cpu"), clip_norm=1.0)
    large, small = torch.tensor([3.0, 4.0]), torch.tensor([0.3, 0.4])
    assert torch.allclose(one_update(precision, large), torch.tensor([0.6, 0.8]))
    assert torch.allclose(one_update(precision, small), small)
    unclipped = precision_for(False, "float16", torch.device("cpu"))
    assert torch.equal(one_update(unclipped, large), large)


def test_under_a_grad_scaler_the_unscaled_gradients_are_clipped_and_overflow_still_skips():
    from torch.amp import GradScaler

    from trainables.precision import Precision

    scaled = Precision("cpu", None, GradScaler("cpu", init_scale=2.0**16), clip_norm=1.0)
    assert scaled.loss_scale() == 2.0**16  # gradients arrive 65536 times too large
    assert torch.allclose(one_update(scaled, torch.tensor([3.0, 4.0])), torch.tensor([0.6, 0.8]))
    assert torch.allclose(one_update(scaled, torch.tensor([0.3, 0.4])), torch.tensor([0.3, 0.4]))
    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scaled.backward((weight * torch.tensor([float("inf"), 1.0])).sum())
    assert bool(scaled.step(optimizer, [weight]))  # skipped: the weights stay
    assert torch.equal(weight.detach(), torch.zeros(2))


def test_a_trial_clips_as_its_settings_say():
    from trainables.memory import MemoryBudget
    from trainables.settings import TrainSettings
    from trainables.trial import start_trial

    settings = TrainSettings(grad_clip_norm=0.5)
    trial = start_trial(settings, 2, 32, MemoryBudget(torch.device("cpu")), None)
    assert trial.precision.clip_norm == 0.5
    plain = start_trial(TrainSettings(), 2, 32, MemoryBudget(torch.device("cpu")), None)
    assert plain.precision.clip_norm is None
