"""`python -m search.run --config FILE [options] [key.path=value ...]`: one whole search.

Parses and validates (a user mistake is one message and exit code 2, before anything
starts, and before torch, Ray or MLflow load: within about a second), then hands over to
`search.startup` (Ray started while the data is prepared) and `search.execute`: the Tuner,
the fit, the report, and every MLflow run left FINISHED or FAILED.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from analysis.tracking_server import TrackingUnavailable, check_reachable
from search.cli import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    RAY_ENVIRONMENT,
    RunOptions,
    parse_args,
    run_as_command,
)
from search.cluster import ClusterUnavailable, check_address, check_tracking_store
from search.config import (
    ConfigError,
    SearchConfig,
    load_config,
    override_key,
    renamed_notes,
    say_where_set,
)
from search.data_check import check_data
from search.devices import check_devices
from search.errors import Problem
from search.experiment import (
    BadRunName,
    ExperimentNotFound,
    SearchState,
    check_run_name,
    check_storage,
    find_resumable,
    new_run_name,
)
from search.models import check_models


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
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
        arguments=tuple(argv),
    )
    set_on_command_line = [
        *map(override_key, args.overrides),
        *(key for key, value in flags.items() if value is not None),
    ]
    try:
        config = load_config(args.config, args.overrides, flags=flags)
        for note in renamed_notes(config):
            print(note, file=sys.stderr)
        check_devices(config, options)
        check_models(config)
        check_data(config)
        check_storage(Path(config.run.storage_path), config.source)
        check_tracking_store(config.tracking.uri or "", config.source)
        check_reachable(config.tracking.uri or "")
        check_address(options.address)
        check_run_name(options.run_name)
        experiment_dir = locate_experiment(config, options)
    except ConfigError as error:
        where = [say_where_set(problem, set_on_command_line) for problem in error.problems]
        print(ConfigError(error.source, where).render(), file=sys.stderr)
        return EXIT_USAGE
    except (
        TrackingUnavailable,
        ClusterUnavailable,
        ExperimentNotFound,
        FileExistsError,
        BadRunName,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        from search.startup import start  # Ray, and on a thread MLflow, Optuna, Tune, load here

        return start(config, experiment_dir, options)
    except KeyboardInterrupt:  # once the search has begun, `search.execute` says how it ended
        print("Stopped: interrupted before any trial started; the same command starts the "
              "search again.", file=sys.stderr)  # fmt: skip
        return EXIT_INTERRUPTED


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
    run_as_command(main)
