"""`train_classifier`: the Ray Tune trainable, and `fit_classifier`, the loop it runs.

`fit_classifier` knows nothing about Ray: it takes validated settings, prepared data and a
`report` callable, so it is tested directly. `train_classifier` only adapts it to Tune:
config dict in, `tune.report` per epoch, `tune.get_checkpoint` to continue.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune
from torch import nn

from trainables.activation_checkpointing import enable_checkpointing
from trainables.cuda import (
    TorchCudaCard,
    describe_device,
    device_key,
    resolve_device,
    synchronize,
)
from trainables.data import PreparedData, Split, prepare_data
from trainables.data.errors import first_line
from trainables.device_gate import DeviceGate, gate_of
from trainables.eval_batch import EvalBatch
from trainables.memory import MIB, MemoryBudget
from trainables.metrics import (
    OOM_CAUSE_CARD,
    OOM_CAUSE_SHARE,
    STATUS_COMPILE_FAILED,
    STATUS_DIVERGED,
    STATUS_OK,
    STATUS_OOM,
    EvalScores,
    Progress,
    pruned_metrics,
    throughput,
)
from trainables.models import build_model, pretrained_stats
from trainables.noise_scale import NoiseMeter
from trainables.oom import is_out_of_memory, release_memory
from trainables.optimizers import OPTIMIZERS
from trainables.precision import Precision, precision_for
from trainables.run_state import RunState, load_run_state, renamed_from_staged, save_run_state
from trainables.schedules import EpochPlan, epoch_plan, grows_by_noise, warmup_factor
from trainables.settings import TrainSettings
from trainables.speed import (
    PAIRED_BLOCK_SECONDS,
    ConfigSpeed,
    SpeedRatio,
    SpeedWindow,
    own_speed,
    own_time,
    time_in_alternation,
)
from trainables.step import dry_step
from trainables.training import (
    DIVERGED_AFTER_SKIPPED_STEPS,
    EpochResult,
    EpochSteps,
    HostSplit,
    Normaliser,
    SkippedSteps,
    evaluate,
    meter_first_step,
    train_epoch,
)

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
        state = load_run_state(Path(resume_dir)) if resume_dir else None
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


@dataclass
class TrainingRun:
    """Everything a running trial holds, built from settings (and a checkpoint). Named so,
    not Trial: Tune's trial is the config's run as the search sees it."""

    settings: TrainSettings
    model: nn.Module
    optimizer: torch.optim.Optimizer
    precision: Precision
    state: RunState
    budget: MemoryBudget  # the one place that decides what fits and holds the trial to it
    eval_batch: EvalBatch
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

    @property
    def stepper(self) -> nn.Module:
        return self.step_model if self.step_model is not None else self.model

    def plan(self, epoch: int, train_size: int) -> EpochPlan:
        settings = self.settings
        return epoch_plan(
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

    def growths_after(self, plan: EpochPlan, result: EpochResult, train_size: int) -> int:
        """The noise-scale rule's growths for the next epoch, from this epoch's gradients."""
        settings = self.settings
        if settings.adabatch_rule != "noise_scale":
            return self.state.growths
        grows = grows_by_noise(
            result.noise.value, plan.scheduled_batch_size, settings.adabatch_growth, train_size
        )
        return self.state.growths + int(grows)

    def lr_schedule(self, epoch: int, plan: EpochPlan) -> Callable[[float], float]:
        settings = self.settings
        return lambda fraction: (
            plan.lr
            * warmup_factor(
                epoch - 1 + fraction, settings.warmup_epochs, settings.warmup_start_factor
            )
        )


def min_known(*limits: int | None) -> int | None:
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def start_run(
    settings: TrainSettings,
    num_classes: int,
    image_size: int,
    budget: MemoryBudget,
    resume: dict | None,
) -> TrainingRun:
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
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_optimizer(settings, model.parameters(), fused=device.type == "cuda")
    precision = precision_for(settings.amp, settings.amp_dtype, device)
    state, best_weights = RunState(), None
    if resume is not None:
        model.load_state_dict(renamed_from_staged(resume["model"], settings.model))
        optimizer.load_state_dict(resume["optimizer"])
        precision.load_state_dict(resume["precision"])
        state = RunState.from_dict(resume["state"])
        best_weights = resume.get("best_model")
    eval_batch = EvalBatch(
        settings.eval_batch_size,
        timed=not settings.deterministic,
        seconds_per_image=state.eval_seconds_per_image,  # a resumed trial keeps its choice
    )
    step_model = None
    if settings.compile:
        # A reused worker holds the last trial's compiled graphs (and counts them towards
        # torch's recompile limit): each trial compiles afresh, its compile_s its own.
        torch.compiler.reset()
        step_model = torch.compile(model)  # compiled when it first runs
    return TrainingRun(
        settings, model, optimizer, precision, state, budget, eval_batch, best_weights,
        step_model, speeds=ConfigSpeed.from_dict(state.speeds),
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
    """
    with torch_threads(settings.num_threads):
        return _fit(settings, data, report, resume_state, gpu_share)


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
    state = RunState.from_dict(resume_state["state"]) if resume_state else RunState()
    phase, epoch, plan = "placement on the device", state.epoch + 1, None
    budget: MemoryBudget | None = None
    run: TrainingRun | None = None
    try:
        choose_kernels(settings)  # before the budget's warm-up starts cuBLAS
        budget = MemoryBudget(device, settings.memory_budget_mb, gpu_share)
        record |= budget.card_figures()  # an out-of-memory report too tells what the card is
        run = start_run(settings, data.num_classes, data.image_size, budget, resume_state)
        run.gate = trial_gate(budget.memory_device)
        record |= describe_device(budget.memory_device) | describe_run(run)
        run.record = record
        splits = TrialData.of(data, device, settings)
        gated = run.gate.step  # every use of the device, so that a neighbour's timing is clean
        for epoch in range(run.state.epoch + 1, settings.epochs + 1):
            phase, plan = "memory probe", None
            with gated():
                plan = plan_that_fits(run, epoch, splits)
            phase = "training"
            result = train_one_epoch(run, epoch, plan, splits)
            if result.diverged:
                detail = _divergence(result, epoch)
                return _report_pruned(
                    run.state, report, epoch, STATUS_DIVERGED, detail, plan, **record
                )
            phase = "evaluation"
            with gated():
                metrics, progress = evaluate_epoch(run, epoch, plan, result, splits)
            if epoch == settings.epochs and settings.speed_baseline and settings.speed_precision:
                phase = "timing against the baseline"
                metrics |= speed_against_baseline(run, data, progress.images_by_config)
            phase = "saving the trial state"
            run.state = replace(
                run.state,
                epoch=epoch,
                progress=progress,
                last_metrics=metrics,
                skipped_streak=result.skipped_streak,
                growths=run.growths_after(plan, result, len(splits.train)),
                eval_seconds_per_image=dict(run.eval_batch.seconds_per_image),
                compile_seconds=metrics["compile_s"],  # the trial's, this epoch's included
                speeds=run.speeds.to_dict(),
            )
            _save_and_report(run, report)
        return run.state.last_metrics
    except CompileFailed as error:
        detail = f"torch.compile failed in epoch {epoch}: {error}"
        state = run.state if run else state
        return _report_pruned(state, report, epoch, STATUS_COMPILE_FAILED, detail, plan, **record)
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
    state = run.state if run else state
    run = splits = budget = None  # the trial's tensors go before the cache is emptied
    release_memory(memory_device)
    cause = OOM_CAUSE_CARD if card_full else OOM_CAUSE_SHARE
    return _report_pruned(
        state, report, epoch, STATUS_OOM, detail + note, plan, peak_mem_mb=needed_mb,
        peak_reserved_mb=needed_mb, memory_limit_mb=_in_mib(limit), oom_cause=cause, **record,
    )  # fmt: skip


def _in_mib(nbytes: int | None) -> float:
    return math.nan if nbytes is None else nbytes / MIB


def _divergence(result: EpochResult, epoch: int) -> str:
    run = result.longest_skipped_run
    if run >= DIVERGED_AFTER_SKIPPED_STEPS:
        return (
            f"the GradScaler skipped {run} steps in a row in epoch {epoch}: "
            "the gradients stayed non-finite at every loss scale"
        )
    return f"training loss became {result.train_loss} in epoch {epoch}"


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
                *_input_stats(data, settings), device, channels_last=settings.channels_last
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


def plan_that_fits(run: TrainingRun, epoch: int, splits: TrialData) -> EpochPlan:
    """The epoch's plan; when AdaBatch grows the physical batch beyond what fits in memory,
    the previous batch becomes the trial's capacity and the growth goes to accumulation."""
    plan = run.plan(epoch, len(splits.train))
    previous = run.state.last_metrics.get("physical_batch_size")
    if previous is None or plan.batch_size <= previous:
        return plan
    device = run.budget.device
    pixels, labels = splits.train.gather(slice(0, plan.batch_size), pin=False)

    def batch_on_device() -> tuple[torch.Tensor, torch.Tensor]:
        return splits.normalise(pixels.to(device)), labels.to(device)

    if run.budget.fits(run.model, run.optimizer, batch_on_device, run.precision):
        return plan
    run.state = replace(run.state, batch_capacity=int(previous))
    return run.plan(epoch, len(splits.train))


def train_one_epoch(
    run: TrainingRun, epoch: int, plan: EpochPlan, splits: TrialData
) -> EpochResult:
    """The epoch's steps drawn (the order and the augmentation depend on seed and epoch
    only), the CPU meter's check of the first, its new batch shapes compiled (with
    `compile`, off the clock), then the training itself."""
    settings = run.settings
    generator = torch.Generator().manual_seed(_epoch_seed(settings.seed, epoch))
    steps = EpochSteps.drawn(len(splits.train), plan, generator, settings.noise_probes)
    with run.gate.step() if run.gate else nullcontext():  # metering and compiling use it too
        metered = meter_first_step(run.budget, run.model, run.optimizer, splits.train,
                                   splits.normalise, steps, run.precision)  # fmt: skip
        compile_seconds = compile_new_shapes(run, steps, splits)
    result = train_epoch(
        run.stepper,
        run.optimizer,
        splits.train,
        splits.normalise,
        steps,
        precision=run.precision,
        generator=generator,
        budget=run.budget,
        metered=metered,
        augment=settings.augment,
        lr_at=run.lr_schedule(epoch, plan),
        skipped=SkippedSteps(streak=run.state.skipped_streak),
        noise=NoiseMeter(run.model) if steps.measured else None,
        window=speed_window(run, plan),
    )
    return replace(result, compile_seconds=compile_seconds)


def trial_gate(device: torch.device) -> DeviceGate:
    """The gate of the trial's device, the trial registered with it: on the CPU with its
    threads, which decide whether the node is crowded (`DeviceGate.crowded`); on a card,
    so that processes on it that are no trials can be told apart (`outsiders`)."""
    gate = gate_of(device_key(device))
    gate.register(torch.get_num_threads() if device.type == "cpu" else 0)
    return gate


def outsiders(card: TorchCudaCard, gate: DeviceGate) -> int | None:
    """Processes on the card that do not pass its gate (programs other than the search's
    trials); None where NVML does not list the card's processes."""
    processes = card.processes()
    return None if processes is None else max(0, processes - gate.members())


def speed_window(run: TrainingRun, plan: EpochPlan) -> SpeedWindow | None:
    """The epoch's timing of its configuration (`trainables.speed`). A card is always
    crowded (its trials share its time); the CPU where the live trials' threads are more
    than the node's cores."""
    if run.gate is None:
        return None
    device, gate, cores, card = run.budget.device, run.gate, os.cpu_count() or 1, run.budget.card
    return SpeedWindow(
        run.gate,
        lambda: synchronize(device),
        run.speeds,
        ConfigSpeed.key(plan.batch_size, plan.accumulation_steps),
        precision=run.settings.speed_precision,
        max_seconds=run.settings.speed_window_s,
        crowded=lambda: device.type == "cuda" or gate.crowded(cores),
        outsiders=(lambda: outsiders(card, gate)) if card is not None else None,
    )


def speed_against_baseline(
    run: TrainingRun, data: PreparedData, images_by_config: dict[str, int]
) -> dict[str, float]:
    """After the last epoch, the config's speed over its baseline's
    (`TrainSettings.speed_baseline`), timed in alternation
    (`trainables.speed.time_in_alternation`) by fresh models of both on the trial's device:
    the config's configurations as it trained them (`images_by_config`: AdaBatch's grown
    batches too), the baseline's as its schedule plans them. Each configuration warms up
    (allocations, the autotuner, compiling) before the first round, and trains at learning
    rate 0 (the same work, a model that stays where it started). On a crowded device the
    rounds hold it; elsewhere each block passes its gate as any step does. Out of memory:
    NaN."""
    ratio = SpeedRatio(math.nan, math.nan, math.nan, 0)
    device = run.budget.device
    sides: dict[str, list[tuple[float, Callable[[], float]]]] = {}
    try:
        baseline = run.settings.baseline()
        configurations = {
            "base": planned_configurations(baseline, run, len(data.train.labels)),
            "changed": {key: float(images) for key, images in images_by_config.items()},
        }
        for name, settings in (("base", baseline), ("changed", run.settings)):
            fresh = start_run(settings, data.num_classes, data.image_size, run.budget, None)
            fresh.gate = run.gate  # its warm-up steps, too, keep out of a neighbour's window
            splits = TrialData.of(data, device, settings)
            sides[name] = alternation_side(fresh, splits, configurations[name])
        gate = run.gate or gate_of(device_key(device))
        crowded = device.type == "cuda" or gate.crowded(os.cpu_count() or 1)
        with gate.exclusive() if crowded else nullcontext():
            ratio = time_in_alternation(
                sides["base"], sides["changed"], precision=run.settings.speed_precision,
                max_seconds=run.settings.speed_baseline_s,
            )  # fmt: skip
    except Exception as error:
        if not is_out_of_memory(error, run.budget.allocator_refused):
            raise
    finally:
        sides.clear()  # the fresh models go before the cache is emptied
        choose_kernels(run.settings)
        release_memory(device)
    return {"speed_vs_baseline": ratio.ratio, "speed_vs_baseline_low": ratio.low,
            "speed_vs_baseline_high": ratio.high}  # fmt: skip


def planned_configurations(
    settings: TrainSettings, run: TrainingRun, train_size: int
) -> dict[str, float]:
    """Each configuration (`ConfigSpeed.key`) of `settings`' epochs as its schedule plans
    them, with the images it trains (an epoch is the whole training split), under the
    trial's known batch capacity."""
    images: dict[str, float] = {}
    for epoch in range(1, settings.epochs + 1):
        plan = epoch_plan(
            epoch, batch_size=settings.batch_size, accumulation_steps=settings.accumulation_steps,
            lr=settings.base_lr, growth=settings.adabatch_growth,
            interval=settings.adabatch_interval, lr_decay=settings.adabatch_lr_decay,
            capacity=min_known(settings.max_batch_size, run.state.batch_capacity),
            train_size=train_size,
        )  # fmt: skip
        key = ConfigSpeed.key(plan.batch_size, plan.accumulation_steps)
        images[key] = images.get(key, 0.0) + train_size
    return images


def alternation_side(
    run: TrainingRun, splits: TrialData, configurations: dict[str, float]
) -> list[tuple[float, Callable[[], float]]]:
    """A side of an alternation: for each configuration (key -> images), its share and a
    block of its steps, sized to `PAIRED_BLOCK_SECONDS` by two warm-up blocks."""
    side = []
    for key, images in configurations.items():
        batch_size, accumulation_steps = ConfigSpeed.parts(key)
        plan = EpochPlan(batch_size, accumulation_steps, lr=0.0, growths=0)
        block = StepBlock(run, splits, plan)
        block.train(2)  # allocations, the autotuner's search, compiling: off the clock
        per_step = block.train(2) * block.images_per_step
        block.steps = max(1, math.ceil(PAIRED_BLOCK_SECONDS / max(per_step, 1e-6)))
        side.append((images, block))
    return side


class StepBlock:
    """Steps of one configuration of a run, `steps` at a call, drawn from its epoch's full
    steps in turn: the seconds per image they took."""

    def __init__(self, run: TrainingRun, splits: TrialData, plan: EpochPlan) -> None:
        self.run, self.splits, self.steps = run, splits, 1
        self.generator = torch.Generator().manual_seed(run.settings.seed)
        drawn = EpochSteps.drawn(len(splits.train), plan, self.generator)
        full = plan.batch_size * plan.accumulation_steps
        whole = [group for group in drawn.batches if sum(map(len, group)) == full]
        self.groups = whole or drawn.batches[:1]  # an epoch shorter than one step: its step
        self.images_per_step = sum(map(len, self.groups[0]))
        self.next = 0

    def train(self, steps: int) -> float:
        groups = [self.groups[(self.next + i) % len(self.groups)] for i in range(steps)]
        self.next = (self.next + steps) % len(self.groups)
        run = self.run
        choose_kernels(run.settings)
        with run.gate.step() if run.gate else nullcontext():
            result = train_epoch(
                run.stepper, run.optimizer, self.splits.train, self.splits.normalise,
                EpochSteps(groups), precision=run.precision, generator=self.generator,
                budget=run.budget, augment=run.settings.augment, lr_at=lambda _: 0.0,
            )  # fmt: skip
        return result.seconds / result.images

    def __call__(self) -> float:
        return self.train(self.steps)


class CompileFailed(Exception):
    """torch.compile could not compile the model: the trial ends, the search goes on."""


def compile_new_shapes(run: TrainingRun, steps: EpochSteps, splits: TrialData) -> float:
    """With `compile`, each micro-batch size of the epoch not compiled yet is compiled
    before the epoch's clock starts, by a step that trains nothing (`dry_step`): a new
    shape (the first epoch, a last partial batch, a grown AdaBatch batch) never compiles
    inside the timed training. The seconds it took; 0 without compile."""
    if run.step_model is None:
        return 0.0
    one_of_size = {len(batch): batch for group in steps.batches for batch in group}
    new = [batch for size, batch in one_of_size.items() if size not in run.compiled_sizes]
    if not new:
        return 0.0
    device = run.budget.device
    synchronize(device)
    started = time.perf_counter()
    for indices in new:
        pixels, labels = splits.train.gather(indices, pin=False)
        batch = splits.normalise(pixels.to(device)), labels.to(device)
        try:
            dry_step(run.step_model, run.optimizer, batch, run.precision)
        except Exception as error:
            if is_out_of_memory(error, run.budget.allocator_refused):
                raise
            # The compiler's failure only if the same step runs uncompiled: a bug of the
            # model or the config stays an error, as it would without compile.
            dry_step(run.model, run.optimizer, batch, run.precision)
            raise CompileFailed(f"{type(error).__name__}: {first_line(error)}") from error
        run.compiled_sizes.add(len(indices))
    synchronize(device)
    return time.perf_counter() - started


def describe_run(run: TrainingRun) -> dict[str, str]:
    """What the trial's steps actually ran with, for its record (`RUN_RECORD`)."""
    settings = run.settings
    return {
        "precision": run.precision.name,
        "memory_format": "channels_last" if settings.channels_last else "contiguous",
        "compile_mode": "compiled" if run.step_model is not None else "eager",
        "matmul_precision": torch.get_float32_matmul_precision(),
    }


def evaluate_epoch(
    run: TrainingRun, epoch: int, plan: EpochPlan, result: EpochResult, splits: TrialData
) -> tuple[dict[str, Any], Progress]:
    """The epoch's metrics after scoring the model on the eval splits.

    Validation is scored every epoch. The training subset and the test split (each about a
    third of the training split, forward only: most of an epoch's time outside training)
    are scored only where their scores are reported: at the last epoch, and for `gen_gap`
    and `val_test_gap`, which belong to the best-val epoch, at the gap epochs
    (`settings.gap_epochs`, the early-stopping rungs). A best-val epoch between them keeps a
    copy of its weights in host memory, scored at the next gap epoch or the last, unless a
    better epoch replaces it first; its own `train_eval_acc` and `test_acc` stay NaN."""
    settings = run.settings

    def score(split: HostSplit) -> tuple[float, float]:
        return run.eval_batch.score(
            plan.batch_size,
            len(split),
            lambda batch_size: evaluate(
                run.model, split, splits.normalise, batch_size=batch_size,
                precision=run.precision,
            ),
        )  # fmt: skip

    def accuracies_beside_val() -> tuple[float, float]:
        return score(splits.train_eval)[0], score(splits.test)[0]

    val_acc, val_loss = score(splits.val)
    improved = run.state.progress.improved_by(val_acc)
    last = epoch == settings.epochs
    gaps_due = last or epoch in settings.gap_epochs
    train_eval_acc = test_acc = math.nan
    if last or (improved and gaps_due):
        train_eval_acc, test_acc = accuracies_beside_val()
    scores = EvalScores(train_eval_acc=train_eval_acc, val_acc=val_acc, test_acc=test_acc)
    progress = run.state.progress.advance(
        epoch, scores, result.seconds + result.compile_seconds, settings.target_acc,
        steps=result.optimizer_steps, config=ConfigSpeed.key(plan.batch_size,
        plan.accumulation_steps), images=result.images, train_seconds=result.seconds,
        compile_seconds=run.state.compile_seconds + result.compile_seconds,
    )  # fmt: skip
    if improved:
        run.best_weights = None if gaps_due else host_copy(run.model)
    if gaps_due and progress.gap_pending:
        if run.best_weights is None:
            raise RuntimeError(f"epoch {progress.best_epoch}'s weights were not kept to score")
        with weights_of(run.model, run.best_weights):
            progress = progress.with_best_scored(*accuracies_beside_val())
        run.best_weights = None
    metrics = epoch_metrics(
        epoch=epoch,
        result=result,
        scores=scores,
        val_loss=val_loss,
        progress=progress,
        plan=plan,
        lr=run.optimizer.param_groups[0]["lr"],
        data_bytes=splits.nbytes,
        memory_limit_bytes=run.budget.limit_bytes,
        compile_seconds=run.state.compile_seconds + result.compile_seconds,
        speeds=run.speeds,
    )
    return {**metrics, **run.record}, progress


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


def _report_pruned(
    state: RunState,
    report: Reporter,
    epoch: int,
    status: str,
    detail: str,
    plan: EpochPlan | None,
    **values: Any,
) -> dict[str, Any]:
    """Report the end of a pruned trial; the status says its values must not be trusted."""
    batch: dict[str, Any] = {}
    if plan is not None:
        batch = {
            "physical_batch_size": plan.batch_size,
            "accumulation_steps": plan.accumulation_steps,
            "effective_batch_size": plan.effective_batch_size,
            "scheduled_batch_size": plan.scheduled_batch_size,
        }
    metrics = pruned_metrics(status, detail, state.last_metrics, epoch=epoch, **batch, **values)
    report(metrics, None)
    return metrics


def _save_and_report(run: TrainingRun, report: Reporter) -> None:
    """The epoch's report, with the trial's state saved every `checkpoint_every` epochs and
    at the last: a retried or resumed trial continues from the last save, exactly."""
    epoch, settings = run.state.epoch, run.settings
    if epoch % settings.checkpoint_every and epoch != settings.epochs:
        report(run.state.last_metrics, None)
        return
    with tempfile.TemporaryDirectory(prefix="trial-state-") as directory:
        save_run_state(
            Path(directory),
            model=run.model,
            optimizer=run.optimizer,
            precision=run.precision,
            state=run.state,
            best_weights=run.best_weights,
        )
        report(run.state.last_metrics, Path(directory))


def epoch_metrics(
    *,
    epoch: int,
    result: EpochResult,
    scores: EvalScores,
    val_loss: float,
    progress: Progress,
    plan: EpochPlan,
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
        seconds = own_time(progress.images_to_target, progress.seconds_by_config, speeds)[0]
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
        "physical_batch_size": plan.batch_size,
        "accumulation_steps": plan.accumulation_steps,
        "effective_batch_size": plan.effective_batch_size,
        "scheduled_batch_size": plan.scheduled_batch_size,
        "lr": lr,
        "peak_mem_mb": result.peak_mem_bytes / MIB,
        "peak_reserved_mb": result.peak_reserved_bytes / MIB,
        "memory_limit_mb": _in_mib(memory_limit_bytes),
        "data_mb": data_bytes / MIB,
        "skipped_steps": result.skipped_steps,
        "status": STATUS_OK,
        "status_detail": "",
        "oom_cause": "",
    }


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


def _epoch_seed(seed: int, epoch: int) -> int:
    return seed * 1_000_003 + epoch
