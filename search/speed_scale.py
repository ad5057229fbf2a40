"""The scale a search's CPU trials read their speed on: the speed references
(`trainables.speed_reference`, one per arithmetic a trial can train in) timed once as the
search starts, in a trial's process.

A CPU trial's throughput is its speed over the reference of its arithmetic timed beside its
blocks, times that reference's scale (`TrainSettings.speed_scale`), so that trials timed at
different moments of a machine whose speed moves compare. It is timed by a Ray task, not in
the driver: a trial's process holds glibc's allocator (`trainables.host_memory`), and the
same reference timed without that hold ran at 0.77x (1405-1482 images/s against 1820-1930,
three fresh processes each, 2026-11-29), a scale a quarter too low. The task starts as soon
as Ray has and the cluster's resources are checked (`search.startup.start`), and runs while
the driver probes AMP and prepares the data; the search waits for it before its first trial.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import ray

from search.cli import RunOptions, say
from search.config import SearchConfig
from search.experiment import SearchState
from trainables.reference_kinds import scales_from
from trainables.settings import TrainSettings


def measures_scale(config: SearchConfig) -> bool:
    """Whether a new search of `config` times the reference: CPU trials that time their
    speed, `search.speed_reference` on, and no train.speed_scale written."""
    return (
        config.search.speed_reference
        and config.resources.gpu_share == 0
        and "speed_scale" not in config.train
        and TrainSettings.from_config(config.train).speed_precision > 0
    )


def trial_threads(config: SearchConfig) -> int:
    """The torch threads a CPU trial of `config` trains with."""
    return int(config.train.get("num_threads") or max(1, int(config.resources.cpu)))


def start(
    config: SearchConfig, options: RunOptions, experiment_dir: Path
) -> Callable[[SearchConfig], SearchConfig]:
    """Start timing the reference (Ray must be up); returns what puts the scale into a
    config, waiting for it. A resumed search keeps the scale it started with, untimed."""
    if options.resume:
        state = SearchState.load(experiment_dir)
        kept = scales_from(state.speed_scale) if state is not None else None
        return lambda resolved: resolved.with_speed_scale(kept) if kept else resolved
    if not measures_scale(config):
        return lambda resolved: resolved
    from trainables.speed_reference import measure_scales

    threads = trial_threads(config)
    timing = ray.remote(measure_scales).options(num_cpus=config.resources.cpu).remote(threads)

    def scaled(resolved: SearchConfig) -> SearchConfig:
        scales = dict(ray.get(timing))
        each = ", ".join(f"{kind} {images_per_s:.0f}" for kind, images_per_s in scales.items())
        say(f"Speed references on a trial's CPU ({threads} thread{'s' if threads > 1 else ''}; "
            f"search.speed_reference), images/s: {each}: the trials' throughput scale, each "
            "trial's by its arithmetic")  # fmt: skip
        return resolved.with_speed_scale(scales)

    return scaled
