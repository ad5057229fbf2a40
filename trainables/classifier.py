"""`train_classifier`: the Ray Tune trainable, and `fit_classifier`, the loop it runs.

`fit_classifier` knows nothing about Ray: it takes validated settings, prepared data and a
`report` callable, so it is tested directly. `train_classifier` only adapts it to Tune:
config dict in, `tune.report` per epoch, `tune.get_checkpoint` to continue.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from ray import tune
from torch import nn

from trainables.data import PreparedData, Split, prepare_data
from trainables.memory import MIB
from trainables.metrics import STATUS_OK, EvalScores, Progress, throughput
from trainables.models import build_model
from trainables.precision import Precision, precision_for
from trainables.schedules import EpochPlan, epoch_plan, warmup_factor
from trainables.settings import TrainSettings
from trainables.training import DeviceSplit, EpochResult, Normaliser, evaluate, train_epoch
from trainables.trial_state import TrialState, load_trial_state, save_trial_state

Reporter = Callable[[dict[str, Any], Path], None]  # (metrics, checkpoint directory)


def train_classifier(config: dict[str, Any], data: PreparedData | None = None) -> None:
    """Ray Tune function trainable: an image classifier trained with the config's settings.

    Every key of `TrainSettings` may be given in `config`; the rest take their defaults.
    Pass prepared data with `tune.with_parameters(train_classifier, data=prepared)` so that
    it is decoded once per search; without it the trial prepares `config["data"]` itself.
    """
    settings = TrainSettings.from_config(config)
    torch.set_num_threads(settings.num_threads or _trial_cpu_share())
    prepared = data if data is not None else prepare_data(settings.data)
    checkpoint = tune.get_checkpoint()
    with checkpoint.as_directory() if checkpoint else nullcontext() as resume_dir:
        state = load_trial_state(Path(resume_dir)) if resume_dir else None
    fit_classifier(settings, prepared, _report_to_tune, resume_state=state)


def _report_to_tune(metrics: dict[str, Any], checkpoint_dir: Path) -> None:
    tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)))


def _trial_cpu_share() -> int:
    """Whole CPUs reserved for this trial, so concurrent trials do not oversubscribe."""
    return max(1, int(tune.get_context().get_trial_resources().head_cpus))


@dataclass
class Trial:
    """Everything a running trial holds, built from settings (and a checkpoint)."""

    settings: TrainSettings
    model: nn.Module
    optimizer: torch.optim.Optimizer
    precision: Precision
    state: TrialState

    def plan(self, epoch: int) -> EpochPlan:
        settings = self.settings
        return epoch_plan(
            epoch,
            batch_size=settings.batch_size,
            accumulation_steps=settings.accumulation_steps,
            lr=settings.lr,
            growth=settings.adabatch_growth,
            interval=settings.adabatch_interval,
            lr_decay=settings.adabatch_lr_decay,
            capacity=settings.max_batch_size,
        )

    def lr_schedule(self, epoch: int, plan: EpochPlan) -> Callable[[float], float]:
        settings = self.settings
        return lambda fraction: (
            plan.lr
            * warmup_factor(
                epoch - 1 + fraction, settings.warmup_epochs, settings.warmup_start_factor
            )
        )


def start_trial(
    settings: TrainSettings, data: PreparedData, device: torch.device, resume: dict | None
) -> Trial:
    torch.backends.cudnn.benchmark = settings.cudnn_benchmark  # per trial: actors are reused
    torch.manual_seed(settings.seed)
    model = build_model(settings.model, data.num_classes, data.image_size).to(device)
    if settings.grad_checkpointing:
        model.enable_checkpointing(settings.checkpoint_segments)
    optimizer = build_optimizer(settings, model.parameters())
    precision = precision_for(settings.amp, settings.amp_dtype, device)
    state = TrialState()
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        precision.load_state_dict(resume["precision"])
        state = TrialState.from_dict(resume["state"])
    return Trial(settings, model, optimizer, precision, state)


def fit_classifier(
    settings: TrainSettings,
    data: PreparedData,
    report: Reporter,
    *,
    resume_state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train for `settings.epochs`, calling `report` after every epoch; return the last metrics.

    With `resume_state` (from a trial checkpoint) training continues after its epoch and
    ends with the same metrics as a run that never stopped: the data order and the
    augmentation of each epoch depend only on (seed, epoch), and the schedules on the epoch.
    """
    device = resolve_device(settings.device)
    trial = start_trial(settings, data, device, resume_state)
    train, val, test = (_to_device(split, device) for split in (data.train, data.val, data.test))
    train_eval = train.subset(_train_eval_indices(len(train), settings).to(device))
    normalise = Normaliser.from_stats(data.mean, data.std, device)
    eval_batch = settings.eval_batch_size

    for epoch in range(trial.state.epoch + 1, settings.epochs + 1):
        plan = trial.plan(epoch)
        generator = torch.Generator().manual_seed(_epoch_seed(settings.seed, epoch))
        result = train_epoch(
            trial.model,
            trial.optimizer,
            train,
            normalise,
            plan=plan,
            precision=trial.precision,
            generator=generator,
            augment=settings.augment,
            lr_at=trial.lr_schedule(epoch, plan),
        )
        train_eval_acc, _ = evaluate(
            trial.model, train_eval, normalise, batch_size=eval_batch, precision=trial.precision
        )
        val_acc, val_loss = evaluate(
            trial.model, val, normalise, batch_size=eval_batch, precision=trial.precision
        )
        test_acc, _ = evaluate(
            trial.model, test, normalise, batch_size=eval_batch, precision=trial.precision
        )
        scores = EvalScores(train_eval_acc=train_eval_acc, val_acc=val_acc, test_acc=test_acc)
        progress = trial.state.progress.advance(epoch, scores, result.seconds, settings.target_acc)
        metrics = epoch_metrics(
            epoch=epoch,
            result=result,
            scores=scores,
            val_loss=val_loss,
            progress=progress,
            plan=plan,
            lr=trial.optimizer.param_groups[0]["lr"],
        )
        trial.state = replace(trial.state, epoch=epoch, progress=progress, last_metrics=metrics)
        _save_and_report(trial, report)
    return trial.state.last_metrics


def _save_and_report(trial: Trial, report: Reporter) -> None:
    with tempfile.TemporaryDirectory(prefix="trial-state-") as directory:
        save_trial_state(
            Path(directory),
            model=trial.model,
            optimizer=trial.optimizer,
            precision=trial.precision,
            state=trial.state,
        )
        report(trial.state.last_metrics, Path(directory))


def epoch_metrics(
    *,
    epoch: int,
    result: EpochResult,
    scores: EvalScores,
    val_loss: float,
    progress: Progress,
    plan: EpochPlan,
    lr: float,
) -> dict[str, Any]:
    """One epoch's values under the schema's names (`trainables.metrics.METRICS`)."""
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
        "throughput": throughput(result.images, result.seconds),
        "epoch_time_s": result.seconds,
        "time_to_target_s": progress.time_to_target_s,
        "batch_size": plan.batch_size,
        "accumulation_steps": plan.accumulation_steps,
        "effective_batch_size": plan.effective_batch_size,
        "lr": lr,
        "peak_mem_mb": result.peak_mem_bytes / MIB,
        "status": STATUS_OK,
    }


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was asked for but torch sees no CUDA device")
    return torch.device(name)


def build_optimizer(
    settings: TrainSettings, parameters: Iterable[nn.Parameter]
) -> torch.optim.Optimizer:
    if settings.optimizer == "sgd":
        return torch.optim.SGD(
            parameters,
            lr=settings.lr,
            momentum=settings.momentum,
            weight_decay=settings.weight_decay,
        )
    return torch.optim.Adam(parameters, lr=settings.lr, weight_decay=settings.weight_decay)


def _to_device(split: Split, device: torch.device) -> DeviceSplit:
    # The arrays may be read-only views of Ray's object store. torch only reads them, and
    # on CPU the trial keeps sharing the store's memory instead of copying the images.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        images = torch.from_numpy(split.images)
        labels = torch.from_numpy(split.labels)
    return DeviceSplit(images.to(device), labels.to(device))


def _train_eval_indices(count: int, settings: TrainSettings) -> torch.Tensor:
    """A fixed training subset for `train_eval_acc`, the same in every epoch and trial."""
    generator = torch.Generator().manual_seed(settings.seed)
    return torch.randperm(count, generator=generator)[: settings.train_eval_size]


def _epoch_seed(seed: int, epoch: int) -> int:
    return seed * 1_000_003 + epoch
