"""An epoch's scoring and its report: the evaluation policy (which splits are scored when,
the best epoch's weights kept in host memory until its gaps are scored) and the metrics of
an epoch under the schema's names (`trainables.metrics.METRICS`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from trainables.memory import MIB, in_mib
from trainables.metrics import (
    STATUS_OK,
    EvalScores,
    Progress,
    throughput,
)
from trainables.schedules import EpochSchedule
from trainables.speed import (
    ConfigSpeed,
    own_speed,
    own_time,
)
from trainables.training import (
    EpochResult,
    HostSplit,
    evaluate,
)
from trainables.trial import TrialData, TrialInProgress, memory_format_named


def evaluate_epoch(
    trial: TrialInProgress,
    epoch: int,
    schedule: EpochSchedule,
    result: EpochResult,
    splits: TrialData,
) -> tuple[dict[str, Any], Progress]:
    """The epoch's metrics after scoring the model on the eval splits.

    Validation is scored every epoch. The training subset and the test split (each about a
    third of the training split, forward only: most of an epoch's time outside training)
    are scored only where their scores are reported: at the last epoch, and for `gen_gap`
    and `val_test_gap`, which belong to the best-val epoch, at the gap epochs
    (`settings.gap_epochs`, the early-stopping rungs). A best-val epoch between them keeps a
    copy of its weights in host memory, scored at the next gap epoch or the last, unless a
    better epoch replaces it first; its own `train_eval_acc` and `test_acc` stay NaN."""
    settings = trial.settings

    def score(split: HostSplit) -> tuple[float, float]:
        return trial.eval_choice.score(
            schedule.batch_size,
            len(split),
            lambda batch_size, layout: evaluate(
                trial.model, split, splits.normalise.laid_out(memory_format_named(layout)),
                batch_size=batch_size, precision=trial.precision,
            ),
        )  # fmt: skip

    def accuracies_beside_val() -> tuple[float, float]:
        return score(splits.train_eval)[0], score(splits.test)[0]

    val_acc, val_loss = score(splits.val)
    improved = trial.state.progress.improved_by(val_acc)
    last = epoch == settings.epochs
    gaps_due = last or epoch in settings.gap_epochs
    train_eval_acc = test_acc = math.nan
    if last or (improved and gaps_due):
        train_eval_acc, test_acc = accuracies_beside_val()
    scores = EvalScores(train_eval_acc=train_eval_acc, val_acc=val_acc, test_acc=test_acc)
    progress = trial.state.progress.advance(
        epoch, scores, result.seconds + result.compile_seconds, settings.target_acc,
        steps=result.optimizer_steps, config=ConfigSpeed.key(schedule.batch_size,
        schedule.accumulation_steps), images=result.images, train_seconds=result.seconds,
        compile_seconds=trial.state.compile_seconds + result.compile_seconds,
    )  # fmt: skip
    if improved:
        trial.best_weights = None if gaps_due else host_copy(trial.model)
    if gaps_due and progress.gap_pending:
        if trial.best_weights is None:
            raise RuntimeError(f"epoch {progress.best_epoch}'s weights were not kept to score")
        with weights_of(trial.model, trial.best_weights):
            progress = progress.with_best_scored(*accuracies_beside_val())
        trial.best_weights = None
    metrics = epoch_metrics(
        epoch=epoch,
        result=result,
        scores=scores,
        val_loss=val_loss,
        progress=progress,
        schedule=schedule,
        lr=trial.optimizer.param_groups[0]["lr"],
        data_bytes=splits.nbytes,
        memory_limit_bytes=trial.budget.limit_bytes,
        compile_seconds=trial.state.compile_seconds + result.compile_seconds,
        speeds=trial.speeds,
    )
    return {**metrics, **trial.record}, progress


def host_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights and buffers, copied to host memory (off the trial's device share)."""
    return {name: value.detach().to("cpu", copy=True) for name, value in model.state_dict().items()}


@contextmanager
def weights_of(model: nn.Module, weights: dict[str, torch.Tensor]) -> Iterator[None]:
    """`model` with `weights` copied in, its own put back after; no second model on the
    device, and the optimizer keeps its references to the same parameters."""
    own = host_copy(model)
    try:
        model.load_state_dict(weights)
        yield
    finally:
        model.load_state_dict(own)


def epoch_metrics(
    *,
    epoch: int,
    result: EpochResult,
    scores: EvalScores,
    val_loss: float,
    progress: Progress,
    schedule: EpochSchedule,
    lr: float,
    data_bytes: int,
    memory_limit_bytes: int | None = None,
    compile_seconds: float = 0.0,
    speeds: ConfigSpeed | None = None,
) -> dict[str, Any]:
    """One epoch's values under the schema's names (`trainables.metrics.METRICS`). The
    throughput and the time to target are the config's own (`trainables.speed.own_time`),
    from the speeds timed so far: each report says what is known by then."""
    speeds = speeds or ConfigSpeed()
    speed = own_speed(progress.images_by_config, progress.seconds_by_config, speeds)
    to_target = progress.time_to_target_s
    if progress.images_to_target is not None:
        # a configuration not timed counts at the wall seconds it took up to the target
        took = progress.seconds_to_target
        took = progress.seconds_by_config if took is None else took
        seconds = own_time(progress.images_to_target, took, speeds)[0]
        to_target = seconds + progress.compile_to_target_s
    return {
        "epoch": epoch,
        "train_loss": result.train_loss,
        "train_acc": result.train_acc,
        "train_eval_acc": scores.train_eval_acc,
        "val_acc": scores.val_acc,
        "val_loss": val_loss,
        "test_acc": scores.test_acc,
        "best_val_acc": progress.best_val_acc,
        "best_epoch": progress.best_epoch,
        "gen_gap": progress.gen_gap,
        "val_test_gap": progress.val_test_gap,
        "throughput": speed[0],
        "throughput_low": speed[1],
        "throughput_high": speed[2],
        "speed_outsiders": speeds.most_outsiders,
        "speed_vs_baseline": math.nan,  # after the last epoch: speed_against_baseline
        "speed_vs_baseline_low": math.nan,
        "speed_vs_baseline_high": math.nan,
        "shared_throughput": throughput(result.images, result.seconds),
        "epoch_time_s": result.seconds,
        "train_time_s": progress.train_seconds,
        "time_to_target_s": to_target,
        "compile_s": compile_seconds,
        "train_steps": progress.train_steps,
        "steps_to_target": progress.steps_to_target,
        "noise_scale": result.noise.value,
        "physical_batch_size": schedule.batch_size,
        "accumulation_steps": schedule.accumulation_steps,
        "effective_batch_size": schedule.effective_batch_size,
        "scheduled_batch_size": schedule.scheduled_batch_size,
        "lr": lr,
        "peak_mem_mb": result.peak_mem_bytes / MIB,
        "peak_reserved_mb": result.peak_reserved_bytes / MIB,
        "memory_limit_mb": in_mib(memory_limit_bytes),
        "data_mb": data_bytes / MIB,
        "skipped_steps": result.skipped_steps,
        "status": STATUS_OK,
        "status_detail": "",
        "oom_cause": "",
    }
