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
