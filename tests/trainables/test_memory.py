import pytest
import torch

from tests.fake_cuda import GIB, MIB, FakeCard, FakeCuda
from trainables.activation_checkpointing import enable_checkpointing
from trainables.cuda import FALLBACK_OUTSIDE_ALLOCATOR_MB, TorchCudaCard
from trainables.memory import (
    MemoryBudget,
    StepLine,
    activation_bytes,
    card_was_full,
    cuda_share,
    extrapolated_step_peak_bytes,
    optimizer_state_bytes,
    step_peak_bytes,
)
from trainables.models import build_model
from trainables.oom import MemoryBudgetExceeded
from trainables.precision import precision_for

CPU = torch.device("cpu")


def resnet18_step_peak(amp: bool = False, checkpointing: bool = False, batch: int = 64) -> int:
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=2, image_size=64)
    if checkpointing:
        model = enable_checkpointing(model)
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


@pytest.mark.parametrize("model_name", ["small_cnn", "resnet18"])
@pytest.mark.parametrize(("amp", "checkpointing"), [(False, False), (True, False), (False, True),
                                                    (True, True)])  # fmt: skip
@pytest.mark.parametrize("batch", [5, 24])
def test_the_peak_from_two_tiny_batches_is_the_meters_peak_at_the_whole_batch(
    model_name, amp, checkpointing, batch
):
    torch.manual_seed(0)
    model = build_model(model_name, num_classes=2, image_size=32).train()
    if checkpointing:
        model = enable_checkpointing(model)
    optimizer = torch.optim.Adam(model.parameters())
    inputs, targets = torch.randn(batch, 3, 32, 32), torch.randint(0, 2, (batch,))
    precision = precision_for(amp, "float16", CPU)
    measured = step_peak_bytes(model, optimizer, inputs, targets, precision)
    assert extrapolated_step_peak_bytes(model, optimizer, inputs, targets, precision) == measured


def test_the_budget_meters_a_batch_shape_once_per_trial(monkeypatch):
    import trainables.memory as memory

    calls = []
    real = memory.extrapolated_step_peak_bytes
    monkeypatch.setattr(memory, "extrapolated_step_peak_bytes",
                        lambda *args: calls.append(len(args[2])) or real(*args))  # fmt: skip
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    budget, fp32 = MemoryBudget(CPU), precision_for(False, "float16", CPU)
    for size in (8, 8, 6, 8):
        budget.enforce(model, optimizer, torch.randn(size, 3, 16, 16),
                       torch.randint(0, 2, (size,)), fp32)  # fmt: skip
    assert calls == [8, 6]


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


# --- a trial's share of a CUDA card, with the card faked -------------------------------------


def test_a_quarter_share_holds_the_context_too_so_four_trials_fit_the_card():
    share = cuda_share(80 * GIB, gpu_share=0.25, budget_mb=None, outside_allocator_bytes=GIB)
    assert share.allowed_bytes == 20 * GIB
    # less the context's later growth, kept aside (CONTEXT_GROWTH_BYTES: 32 MiB)
    assert share.allocator_bytes == 19 * GIB - 32 * MIB
    footprint = share.allocator_bytes + share.outside_allocator_bytes + share.context_growth_bytes
    assert 4 * footprint == 80 * GIB
    assert share.allocator_fraction == pytest.approx((19 * GIB - 32 * MIB) / (80 * GIB))


def test_a_budget_stricter_than_the_share_acts_like_a_card_of_that_size():
    share = cuda_share(80 * GIB, gpu_share=0.5, budget_mb=11_000, outside_allocator_bytes=GIB)
    assert share.allowed_bytes == 11_000 * MIB
    assert cuda_share(80 * GIB, None, None, GIB).allowed_bytes == 80 * GIB  # the whole card


def test_an_oom_is_the_cards_fault_only_when_the_trials_own_limit_would_have_granted_it():
    share = cuda_share(80 * GIB, 0.25, None, GIB)  # 19 GiB for tensors
    ask = 2 * GIB
    assert not card_was_full(share, free_bytes=40 * GIB, reserved_bytes=18 * GIB,
                             requested_bytes=ask)  # over its own limit  # fmt: skip
    assert not card_was_full(share, free_bytes=3 * GIB, reserved_bytes=6 * GIB,
                             requested_bytes=ask)  # the card had room: not the card  # fmt: skip
    assert card_was_full(share, free_bytes=GIB // 2, reserved_bytes=6 * GIB,
                         requested_bytes=ask)  # within its share, the card full  # fmt: skip
    assert not card_was_full(share, GIB // 2, 6 * GIB, requested_bytes=None)  # size unknown
    whole = cuda_share(80 * GIB, None, None, GIB)
    assert not card_was_full(whole, GIB // 2, 6 * GIB, ask)  # a card of its own: its fault


CUDA = torch.device("cuda")  # without an index, as users write it: the current card


def test_a_budget_on_an_unindexed_cuda_device_holds_the_current_card_to_its_share(fake_cuda):
    """A real card refuses `set_per_process_memory_fraction(f, torch.device("cuda"))`; the
    fake refuses an unindexed device everywhere, so this fails if any call misses its index."""
    budget = MemoryBudget(CUDA, gpu_share=0.25)
    assert budget.device == torch.device("cuda", 0)
    card = fake_cuda.cards[0]
    assert card.fraction == pytest.approx((20 * GIB - 532 * MIB) / (80 * GIB))
    assert budget.limit_bytes == 20 * GIB - 532 * MIB  # less the context and its growth


def test_the_fake_card_refuses_a_device_without_an_index_as_a_real_card_does(fake_cuda):
    with pytest.raises(ValueError, match=r"Expected a torch\.device with a specified index"):
        torch.cuda.set_per_process_memory_fraction(0.5, CUDA)
    with pytest.raises(ValueError, match=r"Expected a torch\.device with a specified index"):
        torch.cuda.memory_reserved(CUDA)  # torch itself accepts this one; the fake does not
    with pytest.raises(TypeError, match="must be `float`"):
        torch.cuda.set_per_process_memory_fraction(1, torch.device("cuda", 0))


def test_the_budget_sets_the_allocator_limit_to_the_share_less_the_measured_context(monkeypatch):
    card = FakeCard(context=600 * MIB)
    FakeCuda([card]).install(monkeypatch)
    budget = MemoryBudget(CUDA, budget_mb=None, gpu_share=0.25)
    assert budget.share.outside_allocator_bytes == 600 * MIB  # NVML: the process less its cache
    assert card.fractions == [pytest.approx((20 * GIB - 632 * MIB) / (80 * GIB))]


def test_a_reused_worker_process_gets_each_trials_own_limit_and_measures_its_context_once(
    fake_cuda,
):
    card = fake_cuda.cards[0]
    MemoryBudget(CUDA, gpu_share=0.25)
    card.allocate(3 * GIB)  # the first trial's tensors, freed: 3 GiB stay in the cache
    card.release(3 * GIB)
    second = MemoryBudget(CUDA, gpu_share=None)  # the next trial has the card to itself
    assert card.fractions[0] < 0.25 and card.fractions[1] == pytest.approx(1 - 532 / 81920)
    assert fake_cuda.calls.count("load_kernels") == 1  # the context is measured once
    assert card.reserved == 0  # the last trial's cache would count as this trial's peak
    second.reset_peak()
    assert second.peak(0).reserved_bytes == 0


def test_a_trial_start_gives_nothing_back_when_nothing_is_cached(fake_cuda):
    MemoryBudget(CUDA, gpu_share=0.25)
    assert "empty_cache" not in fake_cuda.calls


def test_without_nvml_the_outside_is_what_the_card_shows_beyond_the_allocator_capped(
    monkeypatch,
):
    alone = FakeCard(nvml_sees_process=False, context=GIB)  # 1 GiB used: this process
    crowded = FakeCard(nvml_sees_process=False, context=GIB, neighbours=70 * GIB)
    for card, expected in ((alone, FALLBACK_OUTSIDE_ALLOCATOR_MB * MIB),
                           (crowded, FALLBACK_OUTSIDE_ALLOCATOR_MB * MIB)):  # fmt: skip
        FakeCuda([card]).install(monkeypatch)
        assert MemoryBudget(CUDA, gpu_share=0.25).share.outside_allocator_bytes == expected
    small = FakeCard(nvml_sees_process=False, context=300 * MIB)
    FakeCuda([small]).install(monkeypatch)
    assert MemoryBudget(CUDA, gpu_share=0.25).share.outside_allocator_bytes == 300 * MIB


def test_a_share_too_small_for_the_context_is_an_out_of_memory_error_at_placement(fake_cuda):
    with pytest.raises(torch.OutOfMemoryError, match="cannot hold this process's CUDA context"):
        MemoryBudget(CUDA, budget_mb=400)  # the context alone is 500 MiB


def test_after_an_oom_the_budget_says_whether_the_card_or_the_trial_ran_out(fake_cuda):
    card = fake_cuda.cards[0]
    budget = MemoryBudget(CUDA, gpu_share=0.25)
    with pytest.raises(torch.OutOfMemoryError) as own:
        card.allocate(21 * GIB)  # over its own limit
    note, card_full = budget.explain_oom(str(own.value))
    assert not card_full and "the card had 81420 MiB free" in note
    card.neighbours = 78 * GIB  # room in its share, none on the card
    with pytest.raises(torch.OutOfMemoryError) as full:
        card.allocate(2 * GIB)
    note, card_full = budget.explain_oom(str(full.value))
    assert card_full and note.endswith("the card was full, not this trial's share")
    assert not budget.explain_oom("CUDA error: out of memory")[1]  # no size: learn from it


def test_a_step_probed_on_the_fake_card_reports_its_reserved_peak_and_an_oom_as_not_fitting(
    fake_cuda,
):
    from tests.fake_cuda import CardLoad

    card = fake_cuda.cards[0]
    budget = MemoryBudget(CPU, budget_mb=2000, card=TorchCudaCard(CUDA))
    model = torch.nn.Sequential(CardLoad(card, per_image=20 * MIB), torch.nn.Flatten(),
                                torch.nn.Linear(3 * 4 * 4, 2))  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fp32 = precision_for(False, "float16", CPU)

    def batch(size):
        return lambda: (torch.randn(size, 3, 4, 4), torch.randint(0, 2, (size,)))

    peak = budget.step_peak(model, optimizer, batch(50), fp32)
    assert peak is not None and peak.reserved_bytes == 1000 * MIB
    assert "empty_cache" not in fake_cuda.calls  # a probe that fits gives nothing back
    assert budget.step_peak(model, optimizer, batch(100), fp32) is None  # 2000 MiB + context
    assert "empty_cache" in fake_cuda.calls  # after the OOM only


def test_a_step_line_through_two_probes_predicts_the_largest_batch_within_a_limit():
    line = StepLine(16, 64, at_small=620 * MIB, at_large=1580 * MIB)  # 300 MiB + 20 per image
    assert line.at(256) == 300 * MIB + 256 * 20 * MIB
    assert line.largest_within(300 * MIB + 100 * 20 * MIB) == 100
    assert line.largest_within(100 * MIB) == 0
    assert StepLine(16, 64, 400, 400).largest_within(500) == 1 << 16  # no growth: no bound


def test_on_cpu_the_meter_decides_and_says_how_much_a_step_needs():
    model = build_model("small_cnn", num_classes=2, image_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batch = torch.randn(8, 3, 16, 16), torch.randint(0, 2, (8,))
    fp32 = precision_for(False, "float16", CPU)
    needed = MemoryBudget(CPU).enforce(model, optimizer, *batch, fp32)
    tight = MemoryBudget(CPU, budget_mb=needed / MIB / 2)
    assert not tight.fits(model, optimizer, lambda: batch, fp32)
    with pytest.raises(MemoryBudgetExceeded, match="a training step of 8 images needs"):
        tight.enforce(model, optimizer, *batch, fp32)
    assert MemoryBudget(CPU, budget_mb=needed / MIB * 2).fits(model, optimizer, lambda: batch, fp32)


def test_the_meter_holds_each_recomputed_regions_input_as_the_checkpoint_does():
    """An input only the checkpoint keeps must stay alive while the meter records: freed, its
    address could go to a later tensor, which would then pass for it and be counted once."""
    import weakref

    from trainables.memory import _Timeline

    timeline = _Timeline(exclude=set())
    block_input = torch.randn(256, 64)
    alive = weakref.ref(block_input)
    with timeline.region([block_input]):
        pass
    del block_input
    assert alive() is not None
    assert timeline.parts().moments == (256 * 64 * 4, 256 * 64 * 4)
