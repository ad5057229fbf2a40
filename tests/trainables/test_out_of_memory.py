"""A trial that runs out of memory is pruned, in every phase and every form; nothing else is."""

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import trainables.classifier as classifier
from tests.fakes import OOM_ERRORS, RaiseWhen
from trainables.classifier import fit_classifier
from trainables.data import PreparedData
from trainables.metrics import METRICS, NUMERIC_METRICS
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
    base = {"epochs": 3, "batch_size": 8, "train_eval_size": 16, "lr": 0.02}
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
    build = classifier.build_model

    def build_with_stage(*args, **kwargs):
        model = build(*args, **kwargs)
        model.stages.insert(1, stage)
        return model

    monkeypatch.setattr(classifier, "build_model", build_with_stage)


def inject(monkeypatch, phase: str, error) -> None:
    """Make the second occurrence of `phase` raise `error()`: a trial fails mid-way."""
    if phase == "forward":
        with_stage(monkeypatch, FailingForward(error, at=8))  # epoch 2 of 6 steps each
    elif phase == "backward":
        FailingBackward.raise_when = RaiseWhen(error, at=8)
        with_stage(monkeypatch, BackwardStage())
    elif phase == "optimizer step":
        monkeypatch.setattr(torch.optim.SGD, "step", RaiseWhen(error, at=8), raising=True)
    elif phase == "evaluation":
        real = classifier.evaluate
        fail = RaiseWhen(error, at=4)  # the first score of epoch 2

        def evaluate(*args, **kwargs):
            fail()
            return real(*args, **kwargs)

        monkeypatch.setattr(classifier, "evaluate", evaluate)


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
    assert last["status"] == "oom" and last["epoch"] == 1 and last["batch_size"] == 8
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
    assert [(m["batch_size"], m["accumulation_steps"]) for m in reports.metrics] == [
        (8, 1),
        (8, 2),
        (8, 4),
    ]
    assert all(m["peak_mem_mb"] <= budget for m in reports.metrics)


def test_the_numeric_schema_leaves_out_only_the_text_fields():
    assert set(METRICS) - set(NUMERIC_METRICS) == {"status", "status_detail", "oom_cause", "node"}
