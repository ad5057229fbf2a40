"""The CUDA path on a real card, where there is one (`python bench/on_device.py` runs the
suite on the lent GPU machine); skipped elsewhere, where tests/fake_cuda.py stands in."""

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from search.capacity import Prober, largest_near
from trainables.classifier import fit_classifier
from trainables.cuda import TorchCudaCard
from trainables.data import DataSettings, prepare_data
from trainables.memory import MemoryBudget
from trainables.settings import TrainSettings

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA card")


@pytest.fixture(autouse=True)
def _whole_card_after():
    """A budget leaves the process's allocator held to its share: the next test in this
    worker gets the whole card back."""
    yield
    TorchCudaCard(torch.device("cuda")).set_allocator_fraction(1.0)


@pytest.fixture(scope="module")
def small_images():
    return prepare_data(DataSettings(image_size=64, train_per_class=64, val_per_class=16,
                                     test_per_class=16))  # fmt: skip


def test_the_card_refuses_a_memory_fraction_for_a_device_without_an_index_as_the_fake_does():
    """What tests/fake_cuda.py stands in for: the call that crashed every trial."""
    with pytest.raises(ValueError, match=r"Expected a torch\.device with a specified index"):
        torch.cuda.set_per_process_memory_fraction(0.5, torch.device("cuda"))


def test_a_budget_on_the_unindexed_cuda_device_sets_the_cards_limit():
    budget = MemoryBudget(torch.device("cuda"), gpu_share=0.25)
    assert budget.device.index is not None
    card = TorchCudaCard(torch.device("cuda"))
    assert 0 < budget.limit_bytes < card.total_bytes() / 4


def test_a_trial_on_the_card_reports_its_full_step_peak_limit_and_card(small_images):
    reports = []
    settings = TrainSettings(model="resnet18", batch_size=32, epochs=2, train_eval_size=32,
                             device="cuda")  # fmt: skip
    last = fit_classifier(settings, small_images, lambda m, _: reports.append(m), gpu_share=0.25)
    assert [m["status"] for m in reports] == ["ok", "ok"]
    assert 0 < last["peak_mem_mb"] <= last["peak_reserved_mb"] < last["memory_limit_mb"]
    card = TorchCudaCard(torch.device("cuda"))
    assert last["device_name"].startswith(torch.cuda.get_device_properties(card.device).name)


def test_a_trial_over_its_share_is_pruned_at_its_first_step(small_images):
    reports = []
    settings = TrainSettings(model="resnet18", batch_size=128, epochs=1, device="cuda",
                             memory_budget_mb=1000)  # fmt: skip
    last = fit_classifier(settings, small_images, lambda m, _: reports.append(m))
    assert last["status"] == "oom" and last["oom_cause"] == "share", last["status_detail"]
    assert "out of memory in training" in last["status_detail"]


def test_the_capacity_prober_finds_the_largest_batch_that_fits_on_the_card():
    settings = TrainSettings(model="resnet18", device="cuda")
    prober = Prober(settings, image_size=64, budget_mb=2000)
    largest = largest_near(prober.fits, prober.predicted_largest())
    # 16 probes on an H200 (2026-11-27, 555 images): near the share the allocator frees its
    # cache and the reserved peaks stop growing with the batch, so the line's guess is low.
    assert largest > 0 and prober.probes <= 20
    # Within a few images of the limit a step fits or not by the blocks cached and the cuDNN
    # plan it gets (an H200, 2026-11-28: 555 found, 556 fitted afterwards), so what the
    # prober promises is its search's first step: about 3% larger does not fit.
    assert prober.fits(largest) and not prober.fits(largest + max(1, largest // 32))


# Each technique switched on once on the card, as a search's trial would run it, on a
# quarter of the card: every epoch ok, and the report says the technique ran.
TECHNIQUES_ON_THE_CARD = {
    "fp16 AMP with its GradScaler, fused SGD": (
        {"amp": True},
        {"precision": "float16"},
    ),
    "fp16 AMP, fused Adam": ({"amp": True, "optimizer": "adam"}, {"precision": "float16"}),
    "bf16 AMP": ({"amp": True, "amp_dtype": "bfloat16"}, {"precision": "bfloat16"}),
    "the cuDNN autotuner": ({"cudnn_benchmark": True}, {}),
    "channels-last": ({"channels_last": True}, {"memory_format": "channels_last"}),
    "torch.compile": ({"compile": True}, {"compile_mode": "compiled"}),
    "activation checkpointing": ({"activation_checkpointing": True}, {}),
    "compile with activation checkpointing": (
        {"compile": True, "activation_checkpointing": True, "amp": True},
        {"compile_mode": "compiled"},
    ),
    "accumulation": ({"accumulation_steps": 2}, {"effective_batch_size": 64}),
    "AdaBatch": ({"adabatch_growth": 2}, {"effective_batch_size": 64}),
    "augmentation": ({"augment": True}, {}),
    "gradient clipping under fp16's GradScaler, fused SGD": (
        {"grad_clip_norm": 1.0, "amp": True},
        {"precision": "float16"},
    ),
    "deterministic kernels": ({"deterministic": True}, {}),
}


@pytest.mark.parametrize("technique", list(TECHNIQUES_ON_THE_CARD))
def test_each_technique_trains_a_trial_on_a_quarter_of_the_card(technique, small_images):
    switches, reported = TECHNIQUES_ON_THE_CARD[technique]
    reports = []
    settings = TrainSettings(model="resnet18", batch_size=32, epochs=2, train_eval_size=32,
                             device="cuda", **switches)  # fmt: skip
    last = fit_classifier(settings, small_images, lambda m, _: reports.append(m), gpu_share=0.25)
    assert [m["status"] for m in reports] == ["ok", "ok"], last.get("status_detail")
    assert 0 < last["peak_mem_mb"] < last["memory_limit_mb"]
    for key, value in reported.items():
        assert last[key] == value, (key, last[key])


@contextmanager
def host_waits_refused() -> Iterator[None]:
    """Inside, an operation that makes the host wait for the card raises (torch's own
    check: a copy from pageable memory, reading a tensor's value, ...)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_augmentation_sends_its_draws_to_the_card_without_waiting_for_it():
    from trainables.augment import random_crop_flip

    images = torch.zeros(64, 3, 32, 32, dtype=torch.uint8, device="cuda")
    with host_waits_refused():
        augmented = random_crop_flip(images, torch.Generator().manual_seed(0))
    assert augmented.shape == images.shape and augmented.device == images.device


def test_a_recomputed_block_restores_its_batch_counters_without_waiting_for_the_card():
    from trainables.activation_checkpointing import enable_checkpointing
    from trainables.models import build_model

    model = enable_checkpointing(build_model("resnet18", 2, 32)).cuda().train()
    inputs = torch.randn(8, 3, 32, 32, device="cuda")
    with host_waits_refused():
        model(inputs).square().sum().backward()
    assert int(model.bn1.num_batches_tracked) == 1
