"""`train_classifier`: the Ray Tune trainable, and `fit_classifier`, the loop it runs.

`fit_classifier` knows nothing about Ray: it takes validated settings, prepared data and a
`report` callable, so it is tested directly. `train_classifier` only adapts it to Tune:
config dict in, `tune.report` per epoch, `tune.get_checkpoint` to continue. The loop puts
together the trial in progress (`trainables.trial`: where each technique is applied), its
epochs (`trainables.training`), their scoring and report (`trainables.evaluation`) and its
speed (`trainables.timing`); here are what ends a trial early (out of memory, divergence, a
failed compile) and its saved state.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from trainables.cuda import describe_device, resolve_device
from trainables.data import PreparedData, prepare_data
from trainables.data.errors import first_line
from trainables.device_gate import leave_gates
from trainables.evaluation import evaluate_epoch
from trainables.host_memory import hold_host_allocator
from trainables.memory import MemoryBudget, in_mib
from trainables.metrics import (
    OOM_CAUSE_CARD,
    OOM_CAUSE_SHARE,
    STATUS_COMPILE_FAILED,
    STATUS_DIVERGED,
    STATUS_OOM,
    pruned_metrics,
)
from trainables.noise_scale import NoiseMeter
from trainables.oom import is_out_of_memory, release_memory
from trainables.schedules import EpochSchedule
from trainables.settings import TrainSettings
from trainables.speed import ConfigSpeed
from trainables.timing import speed_against_baseline, speed_window, trial_gate
from trainables.training import (
    EpochResult,
    EpochSteps,
    SkippedSteps,
    meter_first_step,
    train_epoch,
)
from trainables.trial import (
    CompileFailed,
    TrialData,
    TrialInProgress,
    choose_kernels,
    compile_new_shapes,
    describe_trial,
    start_trial,
)
from trainables.trial_state import TrialRecord, load_trial_state, save_trial_state

# (metrics, checkpoint directory); no checkpoint for the report that ends a pruned trial
Reporter = Callable[[dict[str, Any], Path | None], None]


def train_classifier(config: dict[str, Any], data: PreparedData | None = None) -> None:
    """Ray Tune function trainable: an image classifier trained with the config's settings.

    Every key of `TrainSettings` may be given in `config`; the rest take their defaults.
    Pass prepared data with `tune.with_parameters(train_classifier, data=prepared)` so that
    it is decoded once per search; without it the trial prepares `config["data"]` itself.
    """
    gpu_share = _trial_gpu_share()
    settings = settings_for_trial(config, gpu_share)
    torch.set_num_threads(settings.num_threads or _trial_cpu_share())
    prepared = data if data is not None else prepare_data(settings.data)
    checkpoint = tune.get_checkpoint()
    with checkpoint.as_directory() if checkpoint else nullcontext() as resume_dir:
        state = load_trial_state(Path(resume_dir)) if resume_dir else None
    fit_classifier(settings, prepared, _report_to_tune, resume_state=state, gpu_share=gpu_share)


def settings_for_trial(config: dict[str, Any], gpu_share: float) -> TrainSettings:
    """A trial's settings: `config` over the defaults, and a trial given no GPU share trains
    on the CPU where its device is `auto`. Ray (2.60) leaves the cards visible to a trial
    that asked for none (`RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO` is off by default): `auto`
    would put it on one, held to no share."""
    settings = TrainSettings.from_config(config)
    if gpu_share == 0 and settings.device == "auto":
        return settings.model_copy(update={"device": "cpu"})
    return settings


def _report_to_tune(metrics: dict[str, Any], checkpoint_dir: Path | None) -> None:
    checkpoint = tune.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None
    # Where the epoch ran: on a cluster the nodes may share one address.
    node = ray.get_runtime_context().get_node_id()
    tune.report({**metrics, "node": node}, checkpoint=checkpoint)


def _trial_cpu_share() -> int:
    """Whole CPUs reserved for this trial, so concurrent trials do not oversubscribe."""
    return max(1, int(tune.get_context().get_trial_resources().head_cpus))


def _trial_gpu_share() -> float:
    return float(tune.get_context().get_trial_resources().bundles[0].get("GPU", 0.0))


def fit_classifier(
    settings: TrainSettings,
    data: PreparedData,
    report: Reporter,
    *,
    resume_state: dict[str, Any] | None = None,
    gpu_share: float | None = None,
) -> dict[str, Any]:
    """Train for `settings.epochs`, calling `report` after every epoch; return the last metrics.

    With `resume_state` (from a trial checkpoint) training continues after its epoch and
    ends with the same metrics as a run that never stopped: the data order and the
    augmentation of each epoch depend only on (seed, epoch), and the schedules on the epoch.

    A trial that runs out of memory in any phase (placement on the device, the memory
    probe of a growing batch, training, evaluation, saving the trial state) or whose loss
    stops being finite is pruned: it reports `status` oom or diverged once, naming the phase,
    and returns. Other errors propagate. Every report names the device it ran on and the
    versions of what drove it (`trainables.metrics.DEVICE_RECORD`). With `num_threads`,
    torch computes on that many threads while it trains, as its count was before after.
    The process's host allocator is held to fixed thresholds (`trainables.host_memory`).
    """
    hold_host_allocator()  # a step's speed, not the process's history (host_memory)
    with torch_threads(settings.num_threads):
        try:
            return _fit(settings, data, report, resume_state, gpu_share)
        finally:
            leave_gates()  # ended, it no longer crowds its device's trials


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """torch's thread count set to `count` (None: left as it is) for a while."""
    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _fit(
    settings: TrainSettings,
    data: PreparedData,
    report: Reporter,
    resume_state: dict[str, Any] | None,
    gpu_share: float | None,
) -> dict[str, Any]:
    device = resolve_device(settings.device)
    record = describe_device(device)
    state = TrialRecord.from_dict(resume_state["state"]) if resume_state else TrialRecord()
    phase, epoch, schedule = "placement on the device", state.epoch + 1, None
    budget: MemoryBudget | None = None
    trial: TrialInProgress | None = None
    try:
        choose_kernels(settings)  # before the budget's warm-up starts cuBLAS
        budget = MemoryBudget(device, settings.memory_budget_mb, gpu_share)
        record |= budget.card_figures()  # an out-of-memory report too tells what the card is
        trial = start_trial(settings, data.num_classes, data.image_size, budget, resume_state)
        trial.gate = trial_gate(budget.memory_device)
        record |= describe_device(budget.memory_device) | describe_trial(trial)
        trial.record = record
        splits = TrialData.of(data, device, settings)
        gated = trial.gate.step  # every use of the device, so that a neighbour's timing is clean
        for epoch in range(trial.state.epoch + 1, settings.epochs + 1):
            phase, schedule = "memory probe", None
            with gated():
                schedule = trial.schedule_that_fits(epoch, splits)
            phase = "training"
            result = train_one_epoch(trial, epoch, schedule, splits)
            if result.diverged:
                detail = result.why_diverged(epoch)
                return _report_pruned(
                    trial.state, report, epoch, STATUS_DIVERGED, detail, schedule, **record
                )
            phase = "evaluation"
            with gated():
                metrics, progress = evaluate_epoch(trial, epoch, schedule, result, splits)
            if epoch == settings.epochs and settings.speed_baseline and settings.speed_precision:
                phase = "timing against the baseline"
                metrics |= speed_against_baseline(trial, data, progress.images_by_config)
            phase = "saving the trial state"
            trial.state = replace(
                trial.state,
                epoch=epoch,
                progress=progress,
                last_metrics=metrics,
                skipped_streak=result.skipped_streak,
                growths=trial.growths_after(schedule, result, len(splits.train)),
                eval_seconds_per_image=dict(trial.eval_choice.seconds_per_image),
                compile_seconds=metrics["compile_s"],  # the trial's, this epoch's included
                speeds=trial.speeds.to_dict(),
            )
            _save_and_report(trial, report)
        return trial.state.last_metrics
    except CompileFailed as error:
        detail = f"torch.compile failed in epoch {epoch}: {error}"
        state = trial.state if trial else state
        return _report_pruned(
            state, report, epoch, STATUS_COMPILE_FAILED, detail, schedule, **record
        )
    except Exception as error:
        if not is_out_of_memory(error, budget.allocator_refused if budget else None):
            raise
        # Only text and numbers leave this block: the traceback holds the step's tensors.
        detail = f"out of memory in {phase}: {first_line(error)}"
        message = str(error)
        needed_mb = getattr(error, "needed_mb", math.nan)  # known under a CPU budget
    note, card_full = budget.explain_oom(message) if budget else ("", False)
    limit = budget.limit_bytes if budget else None
    memory_device = budget.memory_device if budget else device
    state = trial.state if trial else state
    trial = splits = budget = None  # the trial's tensors go before the cache is emptied
    release_memory(memory_device)
    cause = OOM_CAUSE_CARD if card_full else OOM_CAUSE_SHARE
    return _report_pruned(
        state, report, epoch, STATUS_OOM, detail + note, schedule, peak_mem_mb=needed_mb,
        peak_reserved_mb=needed_mb, memory_limit_mb=in_mib(limit), oom_cause=cause, **record,
    )  # fmt: skip


def train_one_epoch(
    trial: TrialInProgress, epoch: int, schedule: EpochSchedule, splits: TrialData
) -> EpochResult:
    """The epoch's steps drawn (the order and the augmentation depend on seed and epoch
    only), the CPU meter's check of the first, its new batch shapes compiled (with
    `compile`, off the clock), then the training itself."""
    settings = trial.settings
    generator = torch.Generator().manual_seed(_epoch_seed(settings.seed, epoch))
    steps = EpochSteps.drawn(len(splits.train), schedule, generator, settings.noise_splits)
    with trial.gate.step() if trial.gate else nullcontext():  # metering and compiling use it too
        metered = meter_first_step(trial.budget, trial.model, trial.optimizer, splits.train,
                                   splits.normalise, steps, trial.precision)  # fmt: skip
        compile_seconds = compile_new_shapes(trial, steps, splits)
    result = train_epoch(
        trial.stepper,
        trial.optimizer,
        splits.train,
        splits.normalise,
        steps,
        precision=trial.precision,
        generator=generator,
        budget=trial.budget,
        metered=metered,
        augment=settings.augment,
        lr_at=trial.lr_schedule(epoch, schedule),
        skipped=SkippedSteps(streak=trial.state.skipped_streak),
        noise=NoiseMeter(trial.model) if steps.measured else None,
        window=speed_window(trial, schedule),
    )
    trial.warm_configurations.add(ConfigSpeed.key(schedule.batch_size, schedule.accumulation_steps))
    return replace(result, compile_seconds=compile_seconds)


def _report_pruned(
    state: TrialRecord,
    report: Reporter,
    epoch: int,
    status: str,
    detail: str,
    schedule: EpochSchedule | None,
    **values: Any,
) -> dict[str, Any]:
    """Report the end of a pruned trial; the status says its values must not be trusted."""
    batch: dict[str, Any] = {}
    if schedule is not None:
        batch = {
            "physical_batch_size": schedule.batch_size,
            "accumulation_steps": schedule.accumulation_steps,
            "effective_batch_size": schedule.effective_batch_size,
            "scheduled_batch_size": schedule.scheduled_batch_size,
        }
    metrics = pruned_metrics(status, detail, state.last_metrics, epoch=epoch, **batch, **values)
    report(metrics, None)
    return metrics


def _save_and_report(trial: TrialInProgress, report: Reporter) -> None:
    """The epoch's report, with the trial's state saved every `checkpoint_every` epochs and
    at the last: a retried or resumed trial continues from the last save, exactly."""
    epoch, settings = trial.state.epoch, trial.settings
    if epoch % settings.checkpoint_every and epoch != settings.epochs:
        report(trial.state.last_metrics, None)
        return
    with tempfile.TemporaryDirectory(prefix="trial-state-") as directory:
        save_trial_state(
            Path(directory),
            model=trial.model,
            optimizer=trial.optimizer,
            precision=trial.precision,
            state=trial.state,
            best_weights=trial.best_weights,
        )
        report(trial.state.last_metrics, Path(directory))


def _epoch_seed(seed: int, epoch: int) -> int:
    return seed * 1_000_003 + epoch
