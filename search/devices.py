"""What a search's trials train on: `resources.gpu: auto` resolved by the cards Ray finds,
the checks of a config's devices (a share Ray could never give, a trial device the trial
will not see, bfloat16 on a card without it, packing by memory with nothing to pack), and
AMP left out of the space where this machine's CPU only emulates it (`leave_out_slow_amp`).

A config that names its share is checked before anything starts (`check_devices`, from
`search.run`: a machine without a card answers without torch); one that says `auto` once
Ray is up (`resolve_gpu`, from `search.startup`), since Ray's count of the cards, on this
machine or the cluster it joined, is what its trials will be given.
"""

from __future__ import annotations

import math
from pathlib import Path

from search.cli import RunOptions
from search.config import ConfigError, SearchConfig
from search.errors import Problem
from search.experiment import SearchState
from trainables.settings import TrainSettings


def check_devices(config: SearchConfig, options: RunOptions) -> None:
    """The checks that need no Ray; with `auto` they wait for `resolve_gpu`."""
    check_packing(config)
    if config.resources.gpu == "auto":
        return
    check_trial_device(config)
    check_local_devices(config, options)


def resolve_gpu(config: SearchConfig, options: RunOptions) -> SearchConfig:
    """With `resources.gpu: auto`, the config resolved by the GPUs Ray counts (this
    machine's, or the cluster's it joined), then checked as `check_devices` checks a
    config that names its share; any other config as it is."""
    if config.resources.gpu != "auto":
        return config
    import ray  # started by now: `search.startup`

    resolved = config.with_cards(int(ray.cluster_resources().get("GPU", 0)))
    check_trial_device(resolved)
    if options.address is None and resolved.resources.gpu_share > 0:
        check_bfloat16(resolved)
    return resolved


# AMP stays sampled on CPU trials where bf16 autocast trains at least this share of float32's
# speed: a CPU with bfloat16 instructions gave 1.12-1.24x, one without them 0.09-0.12x
# (docs/RESULTS.md, sections 22 and 31); the margin keeps a slow moment from deciding.
SLOW_AMP = 0.5


def machine_space(config: SearchConfig, options: RunOptions, experiment_dir: Path) -> SearchConfig:
    """The config with what its space leaves out on this machine: a new search's by
    `leave_out_slow_amp`, a resumed one's as it started (its sampler and Tune's saved
    space hold the space it began with; no probe runs again)."""
    if not options.resume:
        return leave_out_slow_amp(config, options)
    state = SearchState.load(experiment_dir)
    for key, why in (state.left_out if state else {}).items():
        if key in config.space:
            config = config.without_sampled(key, why)
    return config


def leave_out_slow_amp(config: SearchConfig, options: RunOptions) -> SearchConfig:
    """A search of CPU trials on this machine that samples AMP on and off, without AMP
    where a probe (`trainables.amp_probe`) finds bf16 autocast training at under
    `SLOW_AMP` of float32's speed: such trials take most of a search's time to say what one
    probe says. The config as it is elsewhere: trials on cards, on a cluster's nodes (whose
    CPUs this machine cannot time), AMP fixed (or sampled from one value), or
    `search.amp_probe: false`."""
    sampled = config.space.get("amp")
    if (
        not config.search.amp_probe
        or options.address is not None
        or config.resources.gpu_share > 0
        or sampled is None
        or {value for _, value in sampled.candidates()} != {False, True}
    ):
        return config
    model = first_model(config)
    threads = int(config.train.get("num_threads") or max(1, int(config.resources.cpu)))
    print(f"Timing AMP against float32 on this CPU ({model}; search.amp_probe) ...", flush=True)
    slow = slow_cpu_amp(model, config.data.image_size, threads)
    if slow is None:
        return config
    return config.without_sampled("amp", f"{slow}; search.amp_probe=false samples it anyway")


def slow_cpu_amp(model: str, image_size: int, threads: int) -> str | None:
    """Why AMP does not pay on this CPU: bf16 autocast trained `model` at under `SLOW_AMP`
    of float32's speed in a probe (`trainables.amp_probe`); None where it is fast enough."""
    from trainables.amp_probe import PROBE_BATCH, cpu_amp_speed

    speed = cpu_amp_speed(model, image_size, threads=threads)
    if speed >= SLOW_AMP:
        return None
    return (
        f"bf16 autocast trained at {speed:.2f}x float32's speed on this CPU (a probe of "
        f"{model}, batch {PROBE_BATCH}, {threads} thread{'s' if threads > 1 else ''}): it "
        "has no fast bfloat16"
    )


def first_model(config: SearchConfig) -> str:
    """The model a search's first trial trains: the fixed one, or the first sampled."""
    if "model" in config.space:
        return str(config.space["model"].candidates()[0][1])
    return TrainSettings.from_config(config.train).model


def check_packing(config: SearchConfig) -> None:
    """Refuse packing by memory where there is nothing to pack (no GPU share, or whole
    cards per trial) or nothing to pack by (no memory model)."""
    resources = config.resources
    if resources.pack != "memory":
        return
    problem = None
    if resources.gpu == 0:
        problem = "is memory, but resources.gpu is 0: trials on CPU share no card"
    elif resources.gpu != "auto" and resources.gpu > 1:
        problem = (
            f"is memory, but resources.gpu is {resources.gpu:g}: whole cards per trial leave "
            "nothing to pack; give a share of one card (0.25) or auto"
        )
    elif not config.search.predict_oom:
        problem = (
            "is memory, but search.predict_oom is false: the memory model that sizes the "
            "shares is off"
        )
    if problem:
        raise ConfigError(config.source, [Problem("resources.pack", problem)])


def check_local_devices(config: SearchConfig, options: RunOptions) -> None:
    """Refuse a GPU share on a machine without one (Ray would never schedule the trial),
    and bfloat16 where one of its cards lacks it."""
    if options.address is not None or config.resources.gpu_share == 0:
        return  # a cluster's GPUs are checked once connected; CPU trials need no card
    if not _torch_sees_cuda():
        raise ConfigError(
            config.source,
            [
                Problem(
                    "resources.gpu",
                    f"asks for {config.resources.gpu_share:g} GPU per trial, but this machine "
                    "has no GPU that torch can use; run on a GPU machine, or set "
                    "resources.gpu=auto (or 0) and train.device=auto (or cpu)",
                )
            ],
        )
    check_bfloat16(config)


def check_bfloat16(config: SearchConfig) -> None:
    """Refuse bfloat16 where a card of this machine lacks it: its trials would run float16
    under a bfloat16 setting, and a sampled bfloat16 would spend trials repeating float16."""
    asked = [("train.amp_dtype", "is")] if config.train.get("amp_dtype") == "bfloat16" else []
    sampled = config.space.get("amp_dtype")
    if sampled is not None and "bfloat16" in sampled.values:
        asked.append(("space.amp_dtype", "samples"))
    if not asked:
        return
    from trainables.cuda import cards_without_bf16

    lacking = cards_without_bf16()
    if lacking:
        raise ConfigError(
            config.source,
            [
                Problem(
                    key,
                    f"{verb} bfloat16, but {', '.join(lacking)} has no native bfloat16 "
                    "(it needs compute capability 8.0 or later): its trials would run float16; use "
                    "float16",
                )
                for key, verb in asked
            ],
        )


def check_trial_device(config: SearchConfig) -> None:
    """Refuse a trial device the trial will not see: Ray shows a trial its own GPUs only
    (none without `resources.gpu`), numbered from 0."""
    device = TrainSettings.from_config(config.train).device
    if device.startswith("cuda") and config.resources.gpu_share == 0:
        raise ConfigError(
            config.source,
            [
                Problem(
                    "train.device",
                    f"is {device!r} but each trial gets {config.resources.describe_gpu()}: "
                    "it would see no GPU",
                )
            ],
        )
    index = int(device.partition(":")[2] or 0)
    seen = max(1, math.ceil(config.resources.gpu_share))  # Ray shows a trial only its own GPUs
    if index >= seen:
        raise ConfigError(
            config.source,
            [
                Problem(
                    "train.device",
                    f"is {device!r} but each trial sees {seen} GPU{'s' if seen > 1 else ''} "
                    f"(resources.gpu={config.resources.gpu_share:g}), numbered from 0: use "
                    "'cuda' or 'auto'",
                )
            ],
        )


def _torch_sees_cuda() -> bool:
    from trainables.cuda import available  # only a config that asks for a GPU waits for torch

    return available()
