"""channels_last and torch.compile as switches of the one loop: applied where they say, in
training and evaluation, recorded, and (compile) kept out of the clock."""

import math

import pytest
import torch
from torch import nn

import trainables.classifier as classifier
from tests.trainables.stages import insert_stage
from tests.trainables.test_classifier import Reports
from tests.trainables.test_out_of_memory import settings
from trainables.classifier import fit_classifier
from trainables.data import PreparedData


def first_stage(monkeypatch, stage: nn.Module) -> None:
    """`stage` before the model's first layer: it sees each batch as the loop hands it over
    (a channels-last convolution would make any input's output channels-last)."""
    insert_stage(monkeypatch, stage, at=0)


class LayoutSpy(nn.Module):
    """Records the memory layout of every batch the model sees (channels-last or not), by
    mode, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list[bool]] = {"train": [], "eval": []}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mode = "train" if self.training else "eval"
        self.seen[mode].append(x.is_contiguous(memory_format=torch.channels_last))
        return x

    @property
    def layouts(self) -> dict[str, set[bool]]:
        return {mode: set(seen) for mode, seen in self.seen.items()}


def test_channels_last_puts_the_model_and_every_batch_in_that_layout_and_says_so(
    tiny_data: PreparedData, monkeypatch
):
    spy = LayoutSpy()
    first_stage(monkeypatch, spy)
    built = []
    real_start = classifier.start_trial
    monkeypatch.setattr(classifier, "start_trial",
                        lambda *a, **k: built.append(real_start(*a, **k)) or built[-1])  # fmt: skip
    # a set eval batch is not timed: evaluation stays in the trial's layout
    run = settings(epochs=1, channels_last=True, eval_batch_size=8)
    last = fit_classifier(run, tiny_data, Reports())
    assert spy.layouts == {"train": {True}, "eval": {True}}  # training and evaluation alike
    conv = next(m for m in built[0].model.modules() if isinstance(m, nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert last["memory_format"] == "channels_last" and last["compile_mode"] == "eager"


def test_without_it_the_batches_stay_contiguous(tiny_data: PreparedData, monkeypatch):
    spy = LayoutSpy()
    first_stage(monkeypatch, spy)
    last = fit_classifier(settings(epochs=1, eval_batch_size=8), tiny_data, Reports())
    assert spy.layouts == {"train": {False}, "eval": {False}}
    assert last["memory_format"] == "contiguous" and last["precision"] == "fp32"
    assert last["matmul_precision"] == "high"


def test_a_compiled_trial_compiles_each_batch_shape_once_before_its_clock(
    tiny_data: PreparedData, monkeypatch
):
    """A tiny model (the suite's compiles all are), two epochs of 48 images in batches of 20
    (two shapes: 20 and the last 8). The timed epochs run where a recompile would raise."""
    timed_epoch = classifier.train_epoch

    def never_recompiling(*args, **kwargs):
        with torch.compiler.set_stance("fail_on_recompile"):
            return timed_epoch(*args, **kwargs)

    monkeypatch.setattr(classifier, "train_epoch", never_recompiling)
    reports = Reports()
    fit_classifier(settings(epochs=2, batch_size=20, compile=True), tiny_data, reports)
    first, second = reports.metrics
    assert first["status"] == second["status"] == "ok"
    assert first["compile_mode"] == "compiled"
    assert first["compile_s"] > 0 and second["compile_s"] == first["compile_s"]  # no new shape
    # the epoch's rate is its training part's alone; train_time_s holds the compile too
    assert first["train_time_s"] > first["compile_s"] > first["epoch_time_s"]
    assert first["shared_throughput"] == pytest.approx(48 / first["epoch_time_s"])
    assert math.isfinite(second["val_acc"])
    # stopped after its first epoch and resumed, compiled again, it ends the same
    resumed = Reports()
    fit_classifier(settings(epochs=2, batch_size=20, compile=True), tiny_data, resumed,
                   resume_state=reports.states[0])  # fmt: skip
    for name in ("train_loss", "val_acc", "val_loss", "test_acc", "best_val_acc", "gen_gap"):
        assert resumed.metrics[-1][name] == pytest.approx(second[name]), name
    assert resumed.metrics[-1]["compile_s"] > first["compile_s"]  # its own compile, added


def test_a_compiled_trial_with_activation_checkpointing_compiles(tiny_data: PreparedData):
    reports = Reports()
    last = fit_classifier(
        settings(epochs=1, batch_size=24, compile=True, activation_checkpointing=True),
        tiny_data,
        reports,
    )
    assert last["status"] == "ok", last["status_detail"]
    assert last["compile_mode"] == "compiled" and last["compile_s"] > 0


def test_a_model_that_cannot_be_compiled_ends_its_trial_as_compile_failed(
    tiny_data: PreparedData, monkeypatch
):
    class Uncompilable(nn.Module):
        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("backend compiler failed: no C++ compiler found")

    monkeypatch.setattr(torch, "compile", Uncompilable)
    reports = Reports()
    last = fit_classifier(settings(compile=True), tiny_data, reports)
    assert [m["status"] for m in reports.metrics] == ["compile_failed"]
    assert last["status_detail"] == (
        "torch.compile failed in epoch 1: RuntimeError: backend compiler failed: no C++ "
        "compiler found"
    )


def test_a_model_that_fails_uncompiled_too_is_an_error_not_a_compile_failure(
    tiny_data: PreparedData, monkeypatch
):
    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("the model's own bug")

    first_stage(monkeypatch, Broken())
    with pytest.raises(ValueError, match="the model's own bug"):
        fit_classifier(settings(compile=True), tiny_data, Reports())


@pytest.mark.parametrize("channels_last", [False, True])
def test_evaluation_times_the_other_layout_after_its_own_and_training_keeps_its_own(
    tiny_data: PreparedData, monkeypatch, channels_last: bool
):
    spy = LayoutSpy()
    first_stage(monkeypatch, spy)
    # one epoch, the last: validation, then the training subset and the test split scored
    last = fit_classifier(settings(epochs=1, channels_last=channels_last), tiny_data, Reports())
    assert spy.layouts["train"] == {channels_last}
    assert spy.seen["eval"][0] is channels_last  # validation, in the trial's own layout
    assert spy.layouts["eval"] == {False, True}  # then the other, timed
    assert last["memory_format"] == ("channels_last" if channels_last else "contiguous")
