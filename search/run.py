"""`python -m search.run --config FILE [options] [key.path=value ...]`: one whole search.

Parses and validates (a user mistake is one message and exit code 2, before anything
starts, and before torch, Ray or MLflow load: within about a second), then hands over to
`search.startup` (Ray started while the data is prepared) and `search.execute`: the Tuner,
the fit, the report, and every MLflow run left FINISHED or FAILED.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from search.cli import EXIT_USAGE, RAY_ENVIRONMENT, RunOptions, parse_args
from search.cluster import (
    ClusterUnavailable,
    TrackingUnavailable,
    check_address,
    check_reachable,
    check_tracking_store,
)
from search.config import (
    ConfigError,
    SearchConfig,
    load_config,
    renamed_notes,
    say_where_set,
)
from search.errors import Problem
from search.experiment import (
    ExperimentNotFound,
    SearchState,
    check_storage,
    find_resumable,
    new_run_name,
)
from search.models import check_models
from trainables.settings import TrainSettings


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for key, value in RAY_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    flags = {
        "search.num_samples": args.num_samples,
        "tracking.uri": args.tracking_uri,
        "run.storage_path": args.storage_path,
    }
    options = RunOptions(
        run_name=args.name,
        address=args.address or os.environ.get("RAY_ADDRESS"),
        resume=args.resume,
    )
    set_on_command_line = [
        *(item.partition("=")[0].strip() for item in args.overrides),
        *(key for key, value in flags.items() if value is not None),
    ]
    try:
        config = load_config(args.config, args.overrides, flags=flags)
        for note in renamed_notes(config):
            print(note, file=sys.stderr)
        check_trial_device(config)
        check_local_devices(config, options)
        check_models(config)
        check_storage(Path(config.run.storage_path), config.source)
        check_tracking_store(config.tracking.uri or "", config.source)
        check_reachable(config.tracking.uri or "")
        check_address(options.address)
        experiment_dir = locate_experiment(config, options)
    except ConfigError as error:
        where = [say_where_set(problem, set_on_command_line) for problem in error.problems]
        print(ConfigError(error.source, where).render(), file=sys.stderr)
        return EXIT_USAGE
    except (TrackingUnavailable, ClusterUnavailable, ExperimentNotFound, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    from search.startup import start  # Ray, and on a thread MLflow, Optuna and Tune, load here

    return start(config, experiment_dir, options)


def check_local_devices(config: SearchConfig, options: RunOptions) -> None:
    """Refuse a GPU share on a machine without one (Ray would never schedule the trial),
    and bfloat16 where one of its cards lacks it."""
    if options.address is not None or config.resources.gpu == 0:
        return  # a cluster's GPUs are checked once connected; CPU trials need no card
    if not _torch_sees_cuda():
        raise ConfigError(
            config.source,
            [
                Problem(
                    "resources.gpu",
                    f"asks for {config.resources.gpu:g} GPU per trial, but this machine has no "
                    "GPU that torch can use; run on a GPU machine, or set resources.gpu=0 "
                    "and train.device=cpu",
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
    if device.startswith("cuda") and config.resources.gpu == 0:
        raise ConfigError(
            config.source,
            [
                Problem(
                    "train.device",
                    f"is {device!r} but resources.gpu is 0: trials would see no GPU",
                )
            ],
        )
    index = int(device.partition(":")[2] or 0)
    seen = max(1, math.ceil(config.resources.gpu))  # Ray shows a trial only its own GPUs
    if index >= seen:
        raise ConfigError(
            config.source,
            [
                Problem(
                    "train.device",
                    f"is {device!r} but each trial sees {seen} GPU{'s' if seen > 1 else ''} "
                    f"(resources.gpu={config.resources.gpu:g}), numbered from 0: use 'cuda' "
                    "or 'auto'",
                )
            ],
        )


def _torch_sees_cuda() -> bool:
    from trainables.cuda import available  # only a config that asks for a GPU waits for torch

    return available()


def locate_experiment(config: SearchConfig, options: RunOptions) -> Path:
    storage = Path(config.run.storage_path)
    if options.resume:
        experiment_dir = find_resumable(storage, config.name, options.run_name)
        state = SearchState.load(experiment_dir)
        changed = state.differences(config.as_yaml_dict()) if state and state.config else []
        if changed:
            raise ConfigError(
                config.source,
                [
                    Problem(
                        key,
                        f"is {now!r} but {experiment_dir.name} started with {before!r}; "
                        "a resumed search keeps its config",
                    )
                    for key, before, now in changed
                ],
            )
        return experiment_dir
    experiment_dir = storage / (options.run_name or new_run_name(config.name))
    if experiment_dir.exists():
        raise FileExistsError(
            f"{experiment_dir} already exists; add --resume to continue it, or choose another "
            "--name"
        )
    return experiment_dir


if __name__ == "__main__":
    sys.exit(main())
