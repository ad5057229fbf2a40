"""A trial that runs out of memory is pruned, in every phase and every form; nothing else is."""

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import trainables.classifier as classifier
import trainables.evaluation as evaluation
import trainables.trial as trial
from tests.fakes import OOM_ERRORS, RaiseWhen
from tests.trainables.stages import insert_stage
from trainables.classifier import fit_classifier
from trainables.data import PreparedData
from trainables.metrics import DEVICE_RECORD, METRICS, NUMERIC_METRICS, RUN_RECORD
from trainables.oom import MemoryBudgetExceeded, is_out_of_memory
from trainables.settings import TrainSettings


class Reports:
    def __init__(self) -> None:
        self.metrics: list[dict] = []
        self.checkpoints: list[Path | None] = []

    def __call__(self, metrics: dict, checkpoint_dir: Path | None) -> None:
        self.metrics.append(metrics)
        self.checkpoints.append(checkpoint_dir)


def settings(**changes) -> TrainSettings:
    # No noise split steps: the injected failures count forward passes, one per step, and the
    # CPU meter's two tiny ones, on every machine (a card's path: the fake card below).
    base = {"epochs": 3, "batch_size": 8, "train_eval_size": 16, "lr": 0.02, "noise_split_steps": 0,
            "device": "cpu"}  # fmt: skip
    return TrainSettings(**{**base, **changes})


class FailingForward(nn.Module):
    """A stage that raises in its `at`-th training forward pass."""

    def __init__(self, error, at: int) -> None:
        super().__init__()
        self.raise_when = RaiseWhen(error, at)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            self.raise_when()
        return x


class FailingBackward(torch.autograd.Function):
    raise_when: RaiseWhen

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        FailingBackward.raise_when()
        return grad


class BackwardStage(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return FailingBackward.apply(x) if self.training else x


def with_stage(monkeypatch, stage: nn.Module) -> None:
    """`stage` after the model's first layer."""
    insert_stage(monkeypatch, stage, at=1)


def inject(monkeypatch, phase: str, error) -> None:
    """Make the second occurrence of `phase` raise `error()`: a trial fails mid-way."""
    if phase == "forward":
        # The meter's two tiny forwards, epoch 1's 6 steps, then epoch 2's first step.
        with_stage(monkeypatch, FailingForward(error, at=9))
    elif phase == "backward":
        FailingBackward.raise_when = RaiseWhen(error, at=8)
        with_stage(monkeypatch, BackwardStage())
    elif phase == "optimizer step":
        monkeypatch.setattr(torch.optim.SGD, "step", RaiseWhen(error, at=8), raising=True)
    elif phase == "evaluation":
        real = evaluation.evaluate
        fail = RaiseWhen(error, at=2)  # epoch 2's first score (epoch 1 scores validation)

        def evaluate(*args, **kwargs):
            fail()
            return real(*args, **kwargs)

        monkeypatch.setattr(evaluation, "evaluate", evaluate)


@pytest.mark.parametrize("phase", ["forward", "backward", "optimizer step", "evaluation"])
@pytest.mark.parametrize("form", sorted(OOM_ERRORS))
def test_an_out_of_memory_error_in_any_phase_prunes_the_trial_with_one_last_report(
    tiny_data: PreparedData, monkeypatch, phase, form
):
    inject(monkeypatch, phase, OOM_ERRORS[form])
    reports = Reports()
    last = fit_classifier(settings(), tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["ok", "oom"]
    assert last["epoch"] == 2 and last is reports.metrics[-1]
    assert ("evaluation" if phase == "evaluation" else "training") in last["status_detail"]
    assert set(NUMERIC_METRICS) <= set(last)  # every metric a searcher may need is present
    assert reports.checkpoints[-1] is None  # nothing to resume from a pruned epoch


def test_the_next_trial_in_the_same_process_runs_normally_after_an_oom(
    tiny_data: PreparedData, monkeypatch
):
    with monkeypatch.context() as patch:
        inject(patch, "forward", OOM_ERRORS["torch.OutOfMemoryError"])
        assert fit_classifier(settings(), tiny_data, Reports())["status"] == "oom"
    reports = Reports()
    fit_classifier(settings(), tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["ok", "ok", "ok"]


def test_an_oom_in_the_first_epoch_reports_nan_for_what_was_never_measured(
    tiny_data: PreparedData, monkeypatch
):
    with_stage(monkeypatch, FailingForward(OOM_ERRORS["cuda runtime"], at=1))
    last = fit_classifier(settings(), tiny_data, Reports())
    assert last["status"] == "oom" and last["epoch"] == 1 and last["physical_batch_size"] == 8
    assert math.isnan(last["best_val_acc"]) and math.isnan(last["throughput"])


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x10 and 12x2)"),
        ValueError("out of memory"),  # not an error type torch raises for memory
        KeyError("batch"),
    ],
)
def test_any_other_error_still_fails_loudly(tiny_data: PreparedData, monkeypatch, error):
    with_stage(monkeypatch, FailingForward(lambda: error, at=2))
    with pytest.raises(type(error)):
        fit_classifier(settings(), tiny_data, Reports())


def test_every_listed_form_is_recognised_and_ordinary_errors_are_not():
    assert all(is_out_of_memory(make()) for make in OOM_ERRORS.values())
    assert is_out_of_memory(MemoryBudgetExceeded("over budget", needed_mb=2.0))
    assert not is_out_of_memory(RuntimeError("Expected all tensors to be on the same device"))
    assert not is_out_of_memory(ValueError("out of memory"))


def test_cudnn_not_supported_is_out_of_memory_only_when_it_blames_memory():
    unsupported = RuntimeError(
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
        "non-contiguous input."
    )
    assert not is_out_of_memory(unsupported)
    assert is_out_of_memory(OOM_ERRORS["cudnn workspace"]())


def test_a_cpu_memory_budget_below_the_step_prunes_the_trial_as_a_gpu_of_that_size_would(
    tiny_data: PreparedData,
):
    reports = Reports()
    last = fit_classifier(settings(memory_budget_mb=1.0), tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["oom"]
    assert "over the budget of 1 MiB" in last["status_detail"]
    assert last["peak_mem_mb"] > 1.0  # what the step would have needed


def test_a_loss_that_stops_being_finite_ends_the_trial_as_diverged(tiny_data: PreparedData):
    reports = Reports()
    last = fit_classifier(settings(lr=1e12, momentum=0.0), tiny_data, reports)
    assert reports.metrics[-1]["status"] == "diverged"
    assert "training loss became" in last["status_detail"]
    assert all(m["status"] == "ok" for m in reports.metrics[:-1])


def test_adabatch_growth_that_would_exceed_the_budget_continues_through_accumulation(
    tiny_data: PreparedData,
):
    def peak_at(batch_size: int) -> float:
        reports = Reports()
        fit_classifier(settings(epochs=1, batch_size=batch_size), tiny_data, reports)
        return reports.metrics[-1]["peak_mem_mb"]

    budget = (peak_at(8) + peak_at(16)) / 2  # 8 images fit, 16 do not
    reports = Reports()
    grown = settings(epochs=3, adabatch_growth=2, adabatch_interval=1, memory_budget_mb=budget)
    fit_classifier(grown, tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["ok", "ok", "ok"]
    assert [(m["physical_batch_size"], m["accumulation_steps"]) for m in reports.metrics] == [
        (8, 1),
        (8, 2),
        (8, 4),
    ]
    assert all(m["peak_mem_mb"] <= budget for m in reports.metrics)


def test_the_numeric_schema_leaves_out_only_the_text_fields():
    text = {"status", "status_detail", "oom_cause", "node", *DEVICE_RECORD, *RUN_RECORD}
    assert set(METRICS) - set(NUMERIC_METRICS) == text


def inject_outside_the_epoch(monkeypatch, phase: str, error) -> None:
    """Make `phase`, which runs outside the epoch's training and evaluation, raise `error()`
    in epoch 2 (placement: at once)."""
    if phase == "placement on the device":  # the model is built on the device: it runs out
        monkeypatch.setattr(trial, "build_model", RaiseWhen(error, at=1))
    elif phase == "data":
        monkeypatch.setattr(trial.Normaliser, "from_stats", RaiseWhen(error, at=1))
    elif phase == "memory probe":
        monkeypatch.setattr(classifier.MemoryBudget, "fits", RaiseWhen(error, at=1))
    elif phase == "saving the trial state":
        monkeypatch.setattr(classifier, "save_trial_state", RaiseWhen(error, at=2))


@pytest.mark.parametrize(
    ("phase", "named", "epoch"),
    [
        ("placement on the device", "placement on the device", 1),
        ("data", "placement on the device", 1),  # the normaliser goes to the device then
        ("memory probe", "memory probe", 2),
        ("saving the trial state", "saving the trial state", 2),
    ],
)
def test_an_oom_before_during_or_after_the_epoch_prunes_the_trial_naming_the_phase(
    tiny_data: PreparedData, monkeypatch, phase, named, epoch
):
    inject_outside_the_epoch(monkeypatch, phase, OOM_ERRORS["torch.OutOfMemoryError"])
    growing = settings(adabatch_growth=2) if phase == "memory probe" else settings()
    reports = Reports()
    last = fit_classifier(growing, tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["ok"] * (epoch - 1) + ["oom"]
    assert last["epoch"] == epoch
    assert f"out of memory in {named}:" in last["status_detail"]
    assert last["oom_cause"] == "share"
    assert set(NUMERIC_METRICS) <= set(last)


def test_the_next_trial_in_the_same_process_starts_clean_after_an_oom_at_placement(
    tiny_data: PreparedData, monkeypatch
):
    with monkeypatch.context() as patch:
        inject_outside_the_epoch(patch, "placement on the device", OOM_ERRORS["cuda runtime"])
        assert fit_classifier(settings(), tiny_data, Reports())["status"] == "oom"
    reports = Reports()
    fit_classifier(settings(), tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["ok", "ok", "ok"]


def test_the_adabatch_probe_measures_in_training_mode_where_checkpointing_acts():
    """After an epoch's evaluation the model is in eval mode, where checkpointing is off;
    a probe there measured resnet18 at 32 px without it and stopped the batch growing."""
    from trainables.activation_checkpointing import enable_checkpointing
    from trainables.data import DataSettings, prepare_data
    from trainables.memory import step_peak_bytes
    from trainables.models import build_model
    from trainables.precision import precision_for

    data = prepare_data(
        DataSettings(image_size=32, train_per_class=40, val_per_class=4, test_per_class=4)
    )
    model = build_model("resnet18", num_classes=2, image_size=32)
    model = enable_checkpointing(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = torch.randn(64, 3, 32, 32), torch.randint(0, 2, (64,))
    fp32 = precision_for(False, "float16", torch.device("cpu"))
    in_train = step_peak_bytes(model.train(), optimizer, *batch, fp32)
    in_eval = step_peak_bytes(model.eval(), optimizer, *batch, fp32)
    assert in_train < in_eval
    budget_mb = (in_train + in_eval) / 2 / (1 << 20)
    reports = Reports()
    grown = settings(model="resnet18", activation_checkpointing=True, epochs=2, batch_size=32,
                     adabatch_growth=2, memory_budget_mb=budget_mb, train_eval_size=8)  # fmt: skip
    fit_classifier(grown, data, reports)
    batches = [
        (m["status"], m["physical_batch_size"], m["accumulation_steps"]) for m in reports.metrics
    ]
    assert batches == [
        ("ok", 32, 1),
        ("ok", 64, 1),  # grew: the probe saw the checkpointed step
    ]


class InfOnce(nn.Module):
    """A stage whose `at`-th training forward pass overflows, as fp16 activations can."""

    def __init__(self, at: int | None) -> None:
        super().__init__()
        self.at, self.calls = at, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            return x
        self.calls += 1
        return x * math.inf if self.at is None or self.calls == self.at else x


def with_grad_scaler(monkeypatch) -> None:
    from torch.amp import GradScaler

    from trainables.precision import Precision

    monkeypatch.setattr(
        trial, "precision_for", lambda *_: Precision("cpu", None, GradScaler("cpu"))
    )


def test_a_single_overflow_under_a_grad_scaler_is_a_skipped_step_not_a_divergence(
    tiny_data: PreparedData, monkeypatch
):
    with_grad_scaler(monkeypatch)
    with_stage(monkeypatch, InfOnce(at=9))  # epoch 2, first step (7 passes an epoch: meter + 6)
    reports = Reports()
    fit_classifier(settings(), tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["ok", "ok", "ok"]
    assert [m["skipped_steps"] for m in reports.metrics] == [0, 1, 0]
    assert all(math.isfinite(m["train_loss"]) for m in reports.metrics)


def test_the_same_overflow_without_a_grad_scaler_ends_the_trial_as_diverged(
    tiny_data: PreparedData, monkeypatch
):
    with_stage(monkeypatch, InfOnce(at=9))
    reports = Reports()
    fit_classifier(settings(), tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["ok", "diverged"]


def test_gradients_that_stay_non_finite_under_a_grad_scaler_end_the_trial_as_diverged(
    tiny_data: PreparedData, monkeypatch
):
    with_grad_scaler(monkeypatch)
    with_stage(monkeypatch, InfOnce(at=None))  # every step overflows
    reports = Reports()
    last = fit_classifier(settings(epochs=6), tiny_data, reports)
    assert last["status"] == "diverged" and last["epoch"] == 4  # 24 skipped steps: 4 epochs
    assert "skipped 24 steps in a row" in last["status_detail"]


def on_the_fake_card(monkeypatch) -> None:
    """Trials hold their budget on the faked card (`fake_cuda`, through the project's own
    `TorchCudaCard`) while their tensors stay on the CPU (their settings say `device:
    cpu`: with the fake, `auto` would choose the card)."""
    from trainables.cuda import TorchCudaCard

    real = classifier.MemoryBudget
    monkeypatch.setattr(
        classifier, "MemoryBudget", lambda device, budget_mb, gpu_share: real(
            device, budget_mb, gpu_share, card=TorchCudaCard(torch.device("cuda"))
        ),
    )  # fmt: skip


def test_a_share_too_small_for_the_cuda_context_prunes_the_trial_at_placement(
    tiny_data: PreparedData, monkeypatch, fake_cuda
):
    from tests.fake_cuda import MIB

    fake_cuda.cards[0].context = 900 * MIB
    on_the_fake_card(monkeypatch)
    reports = Reports()
    last = fit_classifier(settings(memory_budget_mb=512, device="cpu"), tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["oom"]
    assert "out of memory in placement on the device" in last["status_detail"]
    assert "cannot hold this process's CUDA context" in last["status_detail"]


def test_an_oom_while_the_whole_card_was_full_is_recorded_as_the_cards_not_the_configs(
    tiny_data: PreparedData, monkeypatch, fake_cuda
):
    from tests.fake_cuda import GIB, CardLoad

    # A quarter of the card is the trial's, but neighbours left only 100 MiB free.
    card = fake_cuda.cards[0]
    card.neighbours = card.total - card.context - 100 * (1 << 20)
    on_the_fake_card(monkeypatch)
    with_stage(monkeypatch, CardLoad(card, per_image=GIB // 16))
    last = fit_classifier(settings(device="cpu"), tiny_data, Reports(), gpu_share=0.25)
    assert last["status"] == "oom" and last["oom_cause"] == "card"
    assert last["status_detail"].endswith("the card was full, not this trial's share")


def test_a_step_over_the_share_of_the_fake_card_fails_at_the_first_full_size_step(
    tiny_data: PreparedData, monkeypatch, fake_cuda
):
    """The first step trains the whole physical batch (no noise split halves it): the
    trial that cannot fit fails there, having trained nothing, and its limit is reported."""
    from tests.fake_cuda import MIB, CardLoad

    card = fake_cuda.cards[0]
    on_the_fake_card(monkeypatch)
    load = CardLoad(card, per_image=100 * MIB)
    with_stage(monkeypatch, load)
    over = settings(batch_size=16, noise_split_steps=4, memory_budget_mb=1500, device="cpu")
    last = fit_classifier(over, tiny_data, Reports())
    assert last["status"] == "oom" and last["oom_cause"] == "share"
    assert "out of memory in training" in last["status_detail"]
    assert "Tried to allocate 1600.00 MiB" in last["status_detail"]
    assert last["memory_limit_mb"] == 968  # the budget less the context and its growth
    assert load.batches == [16]  # its first forward, at the whole batch
    assert card.allocated == 0 and "empty_cache" in fake_cuda.calls


def test_a_trial_on_the_fake_card_reports_the_reserved_peak_of_its_full_size_first_step(
    tiny_data: PreparedData, monkeypatch, fake_cuda
):
    from tests.fake_cuda import MIB, CardLoad
    from trainables.memory import CONTEXT_GROWTH_BYTES

    card = fake_cuda.cards[0]
    on_the_fake_card(monkeypatch)
    with_stage(monkeypatch, CardLoad(card, per_image=10 * MIB, fixed=7 * MIB))
    reports = Reports()
    on_cpu = settings(batch_size=16, noise_split_steps=8, epochs=2, device="cpu")
    fit_classifier(on_cpu, tiny_data, reports)
    assert len(reports.metrics) == 2
    for metrics in reports.metrics:  # 3 steps an epoch, the last two split in halves
        assert metrics["status"] == "ok"
        assert metrics["peak_mem_mb"] == 167  # 16 images: not 8, a split step's half
        assert metrics["peak_reserved_mb"] == 168  # in 2 MiB blocks
        assert metrics["device_name"] == "Fake H100 (81920 MiB)"
        assert metrics["driver_version"] == "580.65.06"
        assert metrics["card_mb"] == card.total / MIB  # what packing by memory learns
        assert metrics["card_context_mb"] == (card.outside + CONTEXT_GROWTH_BYTES) / MIB


def test_only_the_first_epochs_reserved_peak_starts_from_an_empty_cache(
    tiny_data: PreparedData, monkeypatch, fake_cuda
):
    """Evaluation that takes more than training leaves its blocks cached: the next epoch's
    reserved peak holds them. The searcher's memory model learns from epoch 1's alone."""
    from tests.fake_cuda import MIB, CardLoad

    card = fake_cuda.cards[0]
    on_the_fake_card(monkeypatch)
    with_stage(monkeypatch, CardLoad(card, per_image=10 * MIB, fixed=7 * MIB, in_eval=30 * MIB))
    reports = Reports()
    fit_classifier(settings(batch_size=16, epochs=2, device="cpu"), tiny_data, reports)
    first, second = (m["peak_reserved_mb"] for m in reports.metrics)
    assert first == 168  # the training step's, in 2 MiB blocks
    assert second > first  # what evaluation left cached
    assert all(m["peak_mem_mb"] == 167 for m in reports.metrics)  # live tensors: the step's


def test_cudnns_no_engine_near_the_limit_is_out_of_memory_and_prunes_the_trial(
    tiny_data: PreparedData, monkeypatch, fake_cuda
):
    """Every plan's workspace is refused under the share: cuDNN says only that it found no
    engine, and the trial is pruned as out of memory, not ended as an error."""
    from tests.fake_cuda import MIB, CudnnPlanSearch

    card = fake_cuda.cards[0]
    on_the_fake_card(monkeypatch)
    with_stage(monkeypatch, CudnnPlanSearch(card, workspaces=[200 * MIB, 150 * MIB]))
    last = fit_classifier(settings(batch_size=8, memory_budget_mb=1500, device="cpu"),
                          tiny_data, Reports())  # fmt: skip
    assert last["status"] == "oom" and last["oom_cause"] == "share", last["status_detail"]
    assert "unable to find an engine" in last["status_detail"]


def test_cudnns_no_engine_with_room_to_spare_is_an_error(
    tiny_data: PreparedData, monkeypatch, fake_cuda
):
    """The same words for a shape no plan can run: nothing was refused, so it fails loudly."""
    from tests.fake_cuda import MIB, CudnnPlanSearch

    card = fake_cuda.cards[0]
    on_the_fake_card(monkeypatch)
    with_stage(monkeypatch, CudnnPlanSearch(card, workspaces=[MIB], runnable=False))
    with pytest.raises(RuntimeError, match="unable to find an engine"):
        fit_classifier(settings(batch_size=8, memory_budget_mb=1500, device="cpu"),
                       tiny_data, Reports())  # fmt: skip


def test_a_request_refused_before_the_step_began_does_not_count_for_it(fake_cuda):
    """A plan refused in an earlier step (cuDNN went on with another) must not turn a later
    "no engine" for an unrunnable shape into out of memory."""
    from tests.fake_cuda import GIB
    from trainables.cuda import TorchCudaCard
    from trainables.memory import MemoryBudget

    card = fake_cuda.cards[0]
    budget = MemoryBudget(torch.device("cpu"), 1500, card=TorchCudaCard(torch.device("cuda")))
    with pytest.raises(torch.OutOfMemoryError):
        card.hold(2 * GIB)  # refused, before the step
    assert budget.allocator_refused()
    budget.reset_peak()  # the step begins
    assert not budget.allocator_refused()
    with pytest.raises(torch.OutOfMemoryError):
        card.hold(2 * GIB)
    assert budget.allocator_refused()


def test_a_trial_whose_context_grows_after_it_was_measured_stays_inside_its_quarter(
    tiny_data: PreparedData, monkeypatch, fake_cuda
):
    """The context is measured after tiny kernels; the model's own load at its first step
    (a real H100 added up to 10 MiB). A trial that fills its allocator to the limit must
    still keep its whole footprint inside its quarter, so four fit the card together."""
    from tests.fake_cuda import MIB, CardLoad

    card = fake_cuda.cards[0]
    card.context_growth = 24 * MIB
    on_the_fake_card(monkeypatch)
    with_stage(monkeypatch, CardLoad(card, per_image=100 * MIB))
    last = fit_classifier(settings(batch_size=8, device="cpu"), tiny_data, Reports(),
                          gpu_share=0.25)  # fmt: skip
    assert last["status"] == "ok", last["status_detail"]
    limit = last["memory_limit_mb"] * MIB
    assert card.stepped and card.outside == card.context + 24 * MIB
    assert card.outside + limit <= card.total / 4  # the whole footprint, at the allocator's limit
