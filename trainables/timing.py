"""A trial's speed, driven: the epoch's timing window in the device's gate
(`speed_window`) and, after the last epoch, the config timed against its baseline in
alternation (`speed_against_baseline`: fresh runs of both sides, blocks of their steps). The
statistics are `trainables.speed`'s."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext

import torch

from trainables.cuda import (
    TorchCudaCard,
    device_key,
    synchronize,
)
from trainables.data import PreparedData
from trainables.device_gate import DeviceGate, gate_of
from trainables.oom import is_out_of_memory, release_memory
from trainables.schedules import EpochSchedule, epoch_schedule
from trainables.settings import CHOOSES_CONFIGURATIONS, SAME_WORK_PER_IMAGE, TrainSettings
from trainables.speed import (
    ConfigSpeed,
    SpeedRatio,
    SpeedWindow,
    paired_block_steps,
    time_in_alternation,
)
from trainables.speed_reference import SpeedReference
from trainables.training import (
    EpochSteps,
    train_epoch,
)
from trainables.trial import TrialData, TrialInProgress, choose_kernels, min_known, start_trial


def trial_gate(device: torch.device) -> DeviceGate:
    """The gate of the trial's device, the trial registered with it: on the CPU with its
    threads, which decide whether the node is crowded (`DeviceGate.crowded`); on a card,
    so that processes on it that are no trials can be told apart (`outsiders`)."""
    gate = gate_of(device_key(device))
    gate.register(torch.get_num_threads() if device.type == "cpu" else 0)
    if device.type == "cuda":  # a card runs behind its host: a timer waits for its queue
        gate.drain = functools.partial(synchronize, device)
    return gate


def outsiders(card: TorchCudaCard, gate: DeviceGate) -> int | None:
    """Processes on the card that do not pass its gate (programs other than the search's
    trials); None where NVML does not list the card's processes."""
    processes = card.processes()
    return None if processes is None else max(0, processes - gate.members())


def speed_window(trial: TrialInProgress, schedule: EpochSchedule) -> SpeedWindow | None:
    """The epoch's timing of its configuration (`trainables.speed`). A card is always
    crowded (its trials share its time); the CPU where the live trials' threads are more
    than the node's cores."""
    if trial.gate is None:
        return None
    device, gate, cores, card = (
        trial.budget.device,
        trial.gate,
        os.cpu_count() or 1,
        trial.budget.card,
    )
    key = ConfigSpeed.key(schedule.batch_size, schedule.accumulation_steps)
    if trial.reference is None and device.type == "cpu" and trial.speeds.scale:
        # its speed is its kind's scale's unit (`TrainSettings.own_speed_scale`)
        trial.reference = SpeedReference(trial.settings.reference_kind)
    return SpeedWindow(
        trial.gate,
        lambda: synchronize(device),
        trial.speeds,
        key,
        precision=trial.settings.speed_precision,
        max_seconds=trial.settings.speed_window_s,
        crowded=lambda: device.type == "cuda" or gate.crowded(cores),
        outsiders=(lambda: outsiders(card, gate)) if card is not None else None,
        warm=key in trial.warm_configurations,
        reference=trial.reference if device.type == "cpu" else None,
    )


def speed_against_baseline(
    trial: TrialInProgress, data: PreparedData, images_by_config: dict[str, int]
) -> dict[str, float]:
    """After the last epoch, the config's speed over its baseline's
    (`TrainSettings.speed_baseline`), timed in alternation
    (`trainables.speed.time_in_alternation`) by fresh models of both on the trial's device:
    the config's configurations as it trained them (`images_by_config`: AdaBatch's grown
    batches too), the baseline's as its schedule plans them. Each configuration warms up
    (allocations, the autotuner, compiling) before the first round, and trains at learning
    rate 0 (the same work, a model that stays where it started). On a crowded device the
    rounds hold it; elsewhere each block passes its gate as any step does. A baseline
    that changes only which configurations are trained (`CHOOSES_CONFIGURATIONS`: the
    batch, accumulation, AdaBatch) has one fresh model train both sides' configurations,
    and a configuration both sides train is one block, timed once a round. Out of memory:
    NaN."""
    ratio = SpeedRatio(math.nan, math.nan, math.nan, 0)
    device = trial.budget.device
    sides: dict[str, list[tuple[float, Callable[[], float]]]] = {}
    blocks: dict[str, StepBlock] = {}
    try:
        baseline = trial.settings.baseline()
        configurations = {
            "base": scheduled_configurations(baseline, trial, len(data.train.labels)),
            "changed": {key: float(images) for key, images in images_by_config.items()},
        }
        shared = set(trial.settings.speed_baseline or ()) <= (
            CHOOSES_CONFIGURATIONS | SAME_WORK_PER_IMAGE
        )
        # a block both sides train is sized for the side it weighs most in
        shares = largest_shares(configurations.values()) if shared else None
        for name, settings in (("changed", trial.settings), ("base", baseline)):
            if not shared:
                blocks = {}  # this side's own model trains its configurations
            if not shared or name == "changed":
                fresh = start_trial(settings, data.num_classes, data.image_size, trial.budget,
                                    None)  # fmt: skip
                fresh.gate = trial.gate  # its warm-up steps too keep out of a neighbour's window
                splits = TrialData.of(data, device, settings)
            sides[name] = alternation_side(
                fresh, splits, configurations[name], blocks, shares, known=trial.speeds
            )
        gate = trial.gate or gate_of(device_key(device))
        crowded = device.type == "cuda" or gate.crowded(os.cpu_count() or 1)
        with gate.exclusive() if crowded else nullcontext():
            ratio = time_in_alternation(
                sides["base"], sides["changed"], precision=trial.settings.speed_precision,
                max_seconds=trial.settings.speed_baseline_s,
            )  # fmt: skip
    except Exception as error:
        if not is_out_of_memory(error, trial.budget.allocator_refused):
            raise
    finally:
        sides.clear()  # the fresh models go before the cache is emptied
        blocks.clear()
        fresh = splits = None  # the last references to a fresh model
        choose_kernels(trial.settings)
        release_memory(device)
    return {"speed_vs_baseline": ratio.ratio, "speed_vs_baseline_low": ratio.low,
            "speed_vs_baseline_high": ratio.high}  # fmt: skip


def scheduled_configurations(
    settings: TrainSettings, trial: TrialInProgress, train_size: int
) -> dict[str, float]:
    """Each configuration (`ConfigSpeed.key`) of `settings`' epochs as its schedule plans
    them, with the images it trains (an epoch is the whole training split), under the
    trial's known batch capacity."""
    images: dict[str, float] = {}
    for epoch in range(1, settings.epochs + 1):
        schedule = epoch_schedule(
            epoch, batch_size=settings.batch_size, accumulation_steps=settings.accumulation_steps,
            lr=settings.base_lr, growth=settings.adabatch_growth,
            interval=settings.adabatch_interval, lr_decay=settings.adabatch_lr_decay,
            capacity=min_known(settings.max_batch_size, trial.state.batch_capacity),
            train_size=train_size,
        )  # fmt: skip
        key = ConfigSpeed.key(schedule.batch_size, schedule.accumulation_steps)
        images[key] = images.get(key, 0.0) + train_size
    return images


def largest_shares(sides: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Each configuration's largest share of the images of a side that trains it."""
    shares: dict[str, float] = {}
    for images in sides:
        total = sum(images.values())
        for key, count in images.items():
            shares[key] = max(shares.get(key, 0.0), count / total)
    return shares


def alternation_side(
    trial: TrialInProgress,
    splits: TrialData,
    configurations: dict[str, float],
    blocks: dict[str, StepBlock],
    shares: Mapping[str, float] | None = None,
    known: ConfigSpeed | None = None,
) -> list[tuple[float, Callable[[], float]]]:
    """A side of an alternation: for each configuration (key -> images), its share and a
    block of its steps (`paired_block_steps`: its share of the side's round, or of
    `shares` where given: a block both sides train weighs most in one of them), after one
    warm-up step; sized by the speed `known` has for the configuration (the trial that
    trained it), else by that step. A configuration already in `blocks` (the other
    side's, trained alike) keeps its block, and a new one is added there."""
    side = []
    shares = shares or largest_shares([configurations])
    for key, images in configurations.items():
        if key not in blocks:
            batch_size, accumulation_steps = ConfigSpeed.parts(key)
            schedule = EpochSchedule(batch_size, accumulation_steps, lr=0.0, growths=0)
            block = StepBlock(trial, splits, schedule)
            # the first step allocates, searches the autotuner, compiles: off the clock. A
            # block's length sets its precision, not its truth (it weighs by its images),
            # so a speed the trial measured of the configuration (with its own settings,
            # or the other side's: near enough) sizes it; else this step, slower than the
            # steps after it, sizes it short. A second step that sized it until 2026-11-28
            # made the alternations at an AdaBatch knee 1.2x as long (RESULTS.md, section 40)
            first = block.train(1) * block.images_per_step
            speed = known.of(key) if known is not None else None
            measured = speed is not None and speed.images_per_s > 0  # NaN: none
            per_step = block.images_per_step / speed.images_per_s if measured else first
            block.steps = paired_block_steps(per_step, shares[key])
            blocks[key] = block
        side.append((images, blocks[key]))
    return side


class StepBlock:
    """Steps of one configuration of a run, `steps` at a call, drawn from its epoch's full
    steps in turn: the seconds per image they took."""

    def __init__(self, trial: TrialInProgress, splits: TrialData, schedule: EpochSchedule) -> None:
        self.trial, self.splits, self.steps = trial, splits, 1
        self.generator = torch.Generator().manual_seed(trial.settings.seed)
        drawn = EpochSteps.drawn(len(splits.train), schedule, self.generator)
        full = schedule.batch_size * schedule.accumulation_steps
        whole = [group for group in drawn.batches if sum(map(len, group)) == full]
        self.groups = whole or drawn.batches[:1]  # an epoch shorter than one step: its step
        self.images_per_step = sum(map(len, self.groups[0]))
        self.next = 0

    def train(self, steps: int) -> float:
        groups = [self.groups[(self.next + i) % len(self.groups)] for i in range(steps)]
        self.next = (self.next + steps) % len(self.groups)
        trial = self.trial
        choose_kernels(trial.settings)
        with trial.gate.step() if trial.gate else nullcontext():
            result = train_epoch(
                trial.stepper, trial.optimizer, self.splits.train, self.splits.normalise,
                EpochSteps(groups), precision=trial.precision, generator=self.generator,
                budget=trial.budget, augment=trial.settings.augment, lr_at=lambda _: 0.0,
            )  # fmt: skip
        return result.seconds / result.images

    def __call__(self) -> float:
        return self.train(self.steps)
