"""The trial in progress (`TrialInProgress`) and where each technique is applied to it.

`start_trial` builds a trial's model, optimizer and precision from its settings (or its saved
state) on the budget's device: activation checkpointing, channels-last, the precision
(AMP's autocast and GradScaler) and torch.compile are switched here; the kernels (the cuDNN
autotuner, determinism, TF32) by `choose_kernels`, per trial; the inputs' layout by the
`TrialData` normaliser. A new switch is a branch here (and an entry of
`trainables.techniques.TECHNIQUES`). `compile_new_shapes` compiles an epoch's new batch
shapes before its clock starts; `TrialInProgress.schedule_that_fits` checks that a batch
AdaBatch grew still fits before the epoch trains it.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from trainables.activation_checkpointing import enable_checkpointing
from trainables.cuda import (
    synchronize,
)
from trainables.data import PreparedData, Split
from trainables.data.errors import first_line
from trainables.device_gate import DeviceGate
from trainables.eval_choice import LAYOUTS, EvalChoice
from trainables.memory import MemoryBudget
from trainables.models import build_model, pretrained_stats
from trainables.oom import is_out_of_memory
from trainables.optimizers import OPTIMIZERS
from trainables.precision import Precision, precision_for
from trainables.schedules import EpochSchedule, epoch_schedule, grows_by_noise, warmup_factor
from trainables.settings import TrainSettings
from trainables.speed import (
    ConfigSpeed,
)
from trainables.speed_reference import SpeedReference
from trainables.step import dry_step
from trainables.training import (
    EpochResult,
    EpochSteps,
    HostSplit,
    Normaliser,
)
from trainables.trial_state import TrialRecord, renamed_from_staged


@dataclass
class TrialInProgress:
    """Everything a running trial holds, built from settings (and a checkpoint). Named so,
    not Trial: Tune's trial is the config's run as the search sees it."""

    settings: TrainSettings
    model: nn.Module
    optimizer: torch.optim.Optimizer
    precision: Precision
    state: TrialRecord
    budget: MemoryBudget  # the one place that decides what fits and holds the trial to it
    eval_choice: EvalChoice
    # the best-val epoch's weights, in host memory, while its gaps wait to be scored
    best_weights: dict[str, torch.Tensor] | None = None
    # what the training steps call: the model, or torch.compile of it (same parameters)
    step_model: nn.Module | None = None
    # the device (its memory too), the software and the kernels it trains with, in every
    # report
    record: dict[str, Any] = field(default_factory=dict)
    compiled_sizes: set[int] = field(default_factory=set)  # batch sizes compiled so far
    # the device's gate (its neighbours hold while this trial times its speed) and each
    # configuration's timed blocks (trainables.speed)
    gate: DeviceGate | None = None
    speeds: ConfigSpeed = field(default_factory=ConfigSpeed)
    # the fixed workload a CPU trial's blocks are timed beside, once the first is
    # (`trainables.speed_reference`); None: none yet, or a speed read in images per second
    reference: SpeedReference | None = None
    # configurations (`ConfigSpeed.key`) trained in an earlier epoch of this process: their
    # kernels, shapes and allocations are warm, so their next epoch is timed from its start
    warm_configurations: set[str] = field(default_factory=set)

    @property
    def stepper(self) -> nn.Module:
        return self.step_model if self.step_model is not None else self.model

    def schedule(self, epoch: int, train_size: int) -> EpochSchedule:
        settings = self.settings
        return epoch_schedule(
            epoch,
            batch_size=settings.batch_size,
            accumulation_steps=settings.accumulation_steps,
            lr=settings.base_lr,
            growth=settings.adabatch_growth,
            interval=settings.adabatch_interval,
            lr_decay=settings.adabatch_lr_decay,
            capacity=min_known(settings.max_batch_size, self.state.batch_capacity),
            train_size=train_size,
            growths=self.state.growths if settings.adabatch_rule == "noise_scale" else None,
        )

    def schedule_that_fits(self, epoch: int, splits: TrialData) -> EpochSchedule:
        """The epoch's schedule; when AdaBatch grows the physical batch beyond what fits in
        memory, the previous batch becomes the trial's capacity and the growth goes to
        accumulation."""
        schedule = self.schedule(epoch, len(splits.train))
        previous = self.state.last_metrics.get("physical_batch_size")
        if previous is None or schedule.batch_size <= previous:
            return schedule
        device = self.budget.device
        pixels, labels = splits.train.gather(slice(0, schedule.batch_size), pin=False)

        def batch_on_device() -> tuple[torch.Tensor, torch.Tensor]:
            return splits.normalise(pixels.to(device)), labels.to(device)

        if self.budget.fits(self.model, self.optimizer, batch_on_device, self.precision):
            return schedule
        self.state = replace(self.state, batch_capacity=int(previous))
        return self.schedule(epoch, len(splits.train))

    def growths_after(self, schedule: EpochSchedule, result: EpochResult, train_size: int) -> int:
        """The noise-scale rule's growths for the next epoch, from this epoch's gradients."""
        settings = self.settings
        if settings.adabatch_rule != "noise_scale":
            return self.state.growths
        grows = grows_by_noise(
            result.noise.value, schedule.scheduled_batch_size, settings.adabatch_growth, train_size
        )
        return self.state.growths + int(grows)

    def lr_schedule(self, epoch: int, schedule: EpochSchedule) -> Callable[[float], float]:
        settings = self.settings
        return lambda fraction: (
            schedule.lr
            * warmup_factor(
                epoch - 1 + fraction, settings.warmup_epochs, settings.warmup_start_factor
            )
        )


def min_known(*limits: int | None) -> int | None:
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def layout_of(settings: TrainSettings) -> torch.memory_format:
    """The layout of the trial's model and of every batch it trains on (and the memory
    probes'): channels-last where the settings switch it on. Evaluation may score in the
    other (`trainables.eval_choice`)."""
    return memory_format_named(layout_name(settings.channels_last))


def layout_name(channels_last: bool) -> str:
    """A layout as the run record (`memory_format`) and the evaluation choice name it."""
    return LAYOUTS[1] if channels_last else LAYOUTS[0]


MEMORY_FORMATS = dict(zip(LAYOUTS, (torch.contiguous_format, torch.channels_last), strict=True))


def memory_format_named(name: str) -> torch.memory_format:
    """torch's memory format of a layout named as `layout_name` names it."""
    return MEMORY_FORMATS[name]


def start_trial(
    settings: TrainSettings,
    num_classes: int,
    image_size: int,
    budget: MemoryBudget,
    resume: dict | None,
) -> TrialInProgress:
    """The model, optimizer and precision of a trial, as new or from a checkpoint, on the
    budget's device, which the budget already holds to the trial's share of memory.

    The model is built on the device itself (`build_model`): a trial over its share fails
    a moment after it starts, and nothing is copied through host memory."""
    device = budget.device
    torch.manual_seed(settings.seed)
    model = build_model(
        settings.model, num_classes, image_size, pretrained=settings.pretrained, device=device
    )
    if settings.activation_checkpointing:
        model = enable_checkpointing(
            model, modules=settings.recomputed_modules, segments=settings.recomputed_segments
        )
    if settings.channels_last:
        model = model.to(memory_format=layout_of(settings))
    optimizer = build_optimizer(settings, model.parameters(), fused=device.type == "cuda")
    precision = precision_for(settings.amp, settings.amp_dtype, device, settings.grad_clip_norm)
    state, best_weights = TrialRecord(), None
    if resume is not None:
        model.load_state_dict(renamed_from_staged(resume["model"], settings.model))
        optimizer.load_state_dict(resume["optimizer"])
        precision.load_state_dict(resume["precision"])
        state = TrialRecord.from_dict(resume["state"])
        best_weights = resume.get("best_model")
    eval_choice = EvalChoice(
        settings.eval_batch_size,
        timed=not settings.deterministic,
        own_layout=layout_name(settings.channels_last),
        seconds_per_image=state.eval_seconds_per_image,  # a resumed trial keeps its choice
    )
    step_model = None
    if settings.compile:
        # A reused worker holds the last trial's compiled graphs (and counts them towards
        # torch's recompile limit): each trial compiles afresh, its compile_s its own.
        torch.compiler.reset()
        step_model = torch.compile(model)  # compiled when it first runs
    return TrialInProgress(
        settings, model, optimizer, precision, state, budget, eval_choice, best_weights,
        step_model, speeds=ConfigSpeed.from_dict(state.speeds, scale=settings.own_speed_scale),
    )  # fmt: skip


def choose_kernels(settings: TrainSettings) -> None:
    """Kernel choices of this trial. Set per trial, not per process: Tune reuses a worker
    process for the next trial. The cuDNN autotuner picks kernels by timing them, so it is
    off when the trial must repeat exactly; ops without a deterministic kernel warn. Float32
    matmuls take the trial's precision (TF32 by default on CUDA, as a tuned loop does)."""
    torch.set_float32_matmul_precision(settings.matmul_precision)
    if settings.deterministic:
        # cuBLAS is deterministic only with a fixed workspace, read when it starts.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = settings.cudnn_benchmark and not settings.deterministic
    torch.backends.cudnn.deterministic = settings.deterministic
    torch.use_deterministic_algorithms(settings.deterministic, warn_only=True)


def build_optimizer(
    settings: TrainSettings, parameters: Iterable[nn.Parameter], fused: bool = False
) -> torch.optim.Optimizer:
    """The settings' optimizer (`trainables.optimizers.OPTIMIZERS`) at the first lr;
    `fused`: one kernel for all parameters' update (on CUDA), and, under a GradScaler, no
    wait for the device to learn whether the gradients overflowed."""
    kind = OPTIMIZERS[settings.optimizer]
    return kind.build(
        parameters, settings.base_lr, settings.momentum, settings.weight_decay, fused=fused
    )


@dataclass(frozen=True)
class TrialData:
    """The splits a trial reads, in host memory (see `trainables.training`), and the
    normalisation that turns a batch into model input on the device."""

    train: HostSplit
    train_eval: HostSplit  # a fixed training subset scored in eval mode
    val: HostSplit
    test: HostSplit
    normalise: Normaliser

    @classmethod
    def of(cls, data: PreparedData, device: torch.device, settings: TrainSettings) -> TrialData:
        train, val, test = (_host_split(s) for s in (data.train, data.val, data.test))
        return cls(
            train=train,
            train_eval=train.subset(_train_eval_indices(len(train), settings)),
            val=val,
            test=test,
            normalise=Normaliser.from_stats(
                *_input_stats(data, settings), device, memory_format=layout_of(settings)
            ),
        )

    @property
    def nbytes(self) -> int:
        return sum(split.nbytes for split in (self.train, self.train_eval, self.val, self.test))


def _input_stats(
    data: PreparedData, settings: TrainSettings
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The (mean, std) inputs are normalised by: the training split's, or for pretrained
    weights the ones they were trained with, as torchvision's transforms would apply."""
    if settings.pretrained:
        return pretrained_stats(settings.model)
    return data.mean, data.std


def _host_split(split: Split) -> HostSplit:
    # The arrays may be read-only views of Ray's object store. torch only reads them, and
    # the trial keeps sharing the store's memory instead of copying the images.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return HostSplit(torch.from_numpy(split.images), torch.from_numpy(split.labels))


def _train_eval_indices(count: int, settings: TrainSettings) -> torch.Tensor:
    """A fixed training subset for `train_eval_acc`, the same in every epoch and trial."""
    generator = torch.Generator().manual_seed(settings.seed)
    return torch.randperm(count, generator=generator)[: settings.train_eval_size]


def describe_trial(trial: TrialInProgress) -> dict[str, str]:
    """What the trial's steps actually ran with, for its record (`RUN_RECORD`)."""
    return {
        "precision": trial.precision.name,
        "memory_format": layout_name(trial.settings.channels_last),
        "compile_mode": "compiled" if trial.step_model is not None else "eager",
        "matmul_precision": torch.get_float32_matmul_precision(),
    }


class CompileFailed(Exception):
    """torch.compile could not compile the model: the trial ends, the search goes on."""


def compile_new_shapes(trial: TrialInProgress, steps: EpochSteps, splits: TrialData) -> float:
    """With `compile`, each micro-batch size of the epoch not compiled yet is compiled
    before the epoch's clock starts, by a step that trains nothing (`dry_step`): a new
    shape (the first epoch, a last partial batch, a grown AdaBatch batch) never compiles
    inside the timed training. The seconds it took; 0 without compile."""
    if trial.step_model is None:
        return 0.0
    one_of_size = {len(batch): batch for group in steps.batches for batch in group}
    new = [batch for size, batch in one_of_size.items() if size not in trial.compiled_sizes]
    if not new:
        return 0.0
    device = trial.budget.device
    synchronize(device)
    started = time.perf_counter()
    for indices in new:
        pixels, labels = splits.train.gather(indices, pin=False)
        batch = splits.normalise(pixels.to(device)), labels.to(device)
        try:
            dry_step(trial.step_model, trial.optimizer, batch, trial.precision)
        except Exception as error:
            if is_out_of_memory(error, trial.budget.allocator_refused):
                raise
            # The compiler's failure only if the same step runs uncompiled: a bug of the
            # model or the config stays an error, as it would without compile.
            dry_step(trial.model, trial.optimizer, batch, trial.precision)
            raise CompileFailed(f"{type(error).__name__}: {first_line(error)}") from error
        trial.compiled_sizes.add(len(indices))
    synchronize(device)
    return time.perf_counter() - started
