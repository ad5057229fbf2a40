"""`python -m search.run --config FILE [options] [key.path=value ...]`: one whole search.

Parses and validates (a user mistake is one message and exit code 2, before anything
starts), prepares the data once, builds the Tuner, fits, writes the report, and leaves
every MLflow run FINISHED or FAILED.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import ray
import torch
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

from analysis.load import flatten, frame_from_tune, histories_from_tune
from analysis.report import build_report, publish
from search.cluster import ClusterUnavailable, check_address
from search.config import ConfigError, SearchConfig, load_config
from search.console import mlflow_ui_command, plan, runs_link, say, summary_table
from search.errors import Problem
from search.experiment import (
    ExperimentNotFound,
    SearchState,
    check_storage,
    find_resumable,
    new_run_name,
)
from search.recovery import Outcome, fit_with_recovery
from search.tracking import (
    MlflowTrialCallback,
    ParentRun,
    TrackingUnavailable,
    check_reachable,
    git_commit,
)
from search.tuner import build_tuner, restore_tuner
from trainables import TrainSettings, prepare_data
from trainables.data import DataUnavailable, PreparedData
from trainables.metrics import METRICS

METRIC_NAMES = tuple(METRICS)

EXIT_USAGE = 2


@dataclass(frozen=True)
class RunOptions:
    run_name: str | None = None  # --name; default: <config name>-<timestamp>
    address: str | None = None  # Ray cluster; default: RAY_ADDRESS or a local instance
    resume: bool = False


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m search.run",
        description="Search batch-size techniques with Ray Tune; log to MLflow; report the "
        "speed / accuracy / generalization Pareto front.",
        epilog="Example: python -m search.run --config configs/cats_dogs.yaml "
        "search.num_samples=4 train.epochs=3",
    )
    parser.add_argument("--config", required=True, help="YAML file (see configs/)")
    parser.add_argument("--num-samples", type=int, help="trials to run (search.num_samples)")
    parser.add_argument("--name", help="name of this search's results folder and parent run")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (tracking.uri)")
    parser.add_argument("--storage-path", help="folder for Ray Tune results (run.storage_path)")
    parser.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS or local)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the search named by --name, or this config's newest one",
    )
    parser.add_argument("overrides", nargs="*", metavar="key.path=value", help="config overrides")
    return parser.parse_args(argv)


# Ray settings for a readable terminal; a user's own environment wins.
RAY_ENVIRONMENT = {
    "RAY_AIR_NEW_OUTPUT": "0",  # the table engine, which honours our column choice
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",  # loggers are chosen in search.tuner
    # One checkpoint kept per trial makes Tune snapshot often; on local disk that is cheap.
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
}


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
    try:
        config = load_config(args.config, args.overrides, flags=flags)
        check_local_devices(config, options)
        check_storage(Path(config.run.storage_path), config.source)
        check_reachable(config.tracking.uri or "")
        check_address(options.address)
        experiment_dir = locate_experiment(config, options)
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return EXIT_USAGE
    except (TrackingUnavailable, ClusterUnavailable, ExperimentNotFound, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    return run_search(config, experiment_dir, options)


def check_local_devices(config: SearchConfig, options: RunOptions) -> None:
    """Refuse a GPU share on a machine without one: Ray would never schedule the trial."""
    if options.address is not None:
        return  # a cluster's GPUs are checked once connected
    if config.resources.gpu > 0 and not torch.cuda.is_available():
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
    if TrainSettings.from_config(config.train).device == "cuda" and config.resources.gpu == 0:
        raise ConfigError(
            config.source,
            [Problem("train.device", "is 'cuda' but resources.gpu is 0: trials would see no GPU")],
        )


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


AUTOMATIC_RESUMES = 2  # after Ray's memory monitor aborts a fit; then the user decides
EXIT_STOPPED = 1  # stopped by Ray's memory monitor: resumable
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT: resumable


def run_search(config: SearchConfig, experiment_dir: Path, options: RunOptions) -> int:
    say(plan(config, experiment_dir, options.resume))
    try:
        data = prepare_data(config.data)
    except DataUnavailable as error:
        print(ConfigError(config.source, [Problem("data", str(error))]).render(), file=sys.stderr)
        return EXIT_USAGE
    say(f"Data: {data.description}")
    start_ray(options.address)
    try:
        check_cluster_devices(config)
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return EXIT_USAGE
    parent = open_parent_run(config, experiment_dir, options.resume, data)
    callback = MlflowTrialCallback(
        config.tracking.uri or "",
        parent.experiment_id,
        parent.run_id,
        fixed_params=flatten(
            "", {k: v for k, v in config.trainable_config().items() if k != "data"}
        ),
    )
    try:
        result = fit_with_recovery(
            first_tuner=lambda: (
                restore_tuner(config, data, experiment_dir)
                if options.resume
                else build_tuner(config, data, experiment_dir.name, [callback])
            ),
            restored_tuner=lambda: restore_tuner(config, data, experiment_dir),
            expected_trials=config.search.num_samples,
            automatic_resumes=AUTOMATIC_RESUMES,
            say=say,
        )
    except BaseException:
        stop_early(parent, config, experiment_dir, "the search failed")
        raise
    if result.outcome is not Outcome.FINISHED:
        reason = {
            Outcome.INTERRUPTED: f"the search was interrupted ({result.detail})",
            Outcome.HOST_MEMORY: (
                f"Ray's memory monitor killed trials {result.automatic_resumes + 1} times "
                f"({result.detail}); free memory or lower resources.memory_budget_mb / "
                "search.max_concurrent_trials"
            ),
        }[result.outcome]
        stop_early(parent, config, experiment_dir, reason)
        return EXIT_INTERRUPTED if result.outcome is Outcome.INTERRUPTED else EXIT_STOPPED
    report = build_report(
        frame_from_tune(experiment_dir, METRIC_NAMES),
        config.objectives,
        experiment_dir / "report",
        title=experiment_dir.name,
        bounds=config.search.hypervolume_bounds or None,
        histories=histories_from_tune(experiment_dir),
    )
    publish(parent.client, parent.run_id, report)
    parent.close_unfinished_trials("lost")  # trials whose runs died with an earlier driver
    parent.finish("FINISHED")
    say()
    say(summary_table(report.frame, list(config.space), list(config.objectives)))
    say()
    say(f"Results: {experiment_dir}")
    say(f"Report:  {experiment_dir / 'report' / 'report.html'}")
    say(f"Hypervolume of the front: {report.hypervolume:.4f}")
    say(f"MLflow:  {config.tracking.uri}")
    uri = config.tracking.uri or ""
    if not uri.startswith(("http://", "https://")):
        say(f"Review:  {mlflow_ui_command(uri)}")
    say(f"Runs:    {runs_link(uri, parent.experiment_id)}")
    return 0


def resume_command(config: SearchConfig, experiment_dir: Path) -> str:
    return f"python -m search.run --config {config.source} --name {experiment_dir.name} --resume"


def stop_early(parent: ParentRun, config: SearchConfig, experiment_dir: Path, reason: str) -> None:
    """Leave no run RUNNING, and say how to continue."""
    parent.close_unfinished_trials("interrupted")
    parent.finish("FAILED")
    print(f"Stopped: {reason}.", file=sys.stderr)
    print(
        f"To continue where it stopped: {resume_command(config, experiment_dir)}", file=sys.stderr
    )


def start_ray(address: str | None) -> None:
    if address is None:
        # Ray's own services listen on the machine's address (Ray turns a loopback node
        # address into a reachable one); its token authentication, on by default since
        # 2.59, guards them and is never turned off here. No dashboard is started.
        ray.init(
            include_dashboard=False,
            log_to_driver=False,  # trial errors still reach the terminal through Tune
            ignore_reinit_error=True,
        )
    else:
        ray.init(address=address, log_to_driver=False, ignore_reinit_error=True)


def check_cluster_devices(config: SearchConfig) -> None:
    gpus = ray.cluster_resources().get("GPU", 0)
    if config.resources.gpu > 0 and gpus == 0:
        raise ConfigError(
            config.source,
            [
                Problem(
                    "resources.gpu",
                    f"asks for {config.resources.gpu:g} GPU per trial, but the "
                    "Ray cluster has no GPUs",
                )
            ],
        )
    cpus = ray.cluster_resources().get("CPU", 0)
    if config.resources.cpu > cpus:
        raise ConfigError(
            config.source,
            [
                Problem(
                    "resources.cpu",
                    f"asks for {config.resources.cpu:g} CPUs per trial, but the "
                    f"Ray cluster has {cpus:g}",
                )
            ],
        )


def open_parent_run(
    config: SearchConfig, experiment_dir: Path, resume: bool, data: PreparedData
) -> ParentRun:
    previous = SearchState.load(experiment_dir) if resume else None
    commit = git_commit(Path(__file__).resolve().parent)
    tags = {"data_source": data.source, "data": data.description[:5000]}
    if commit:
        tags[MLFLOW_GIT_COMMIT] = commit
    parent = ParentRun.start(
        tracking_uri=config.tracking.uri or "",
        experiment=config.tracking.experiment or config.name,
        run_name=experiment_dir.name,
        params=flatten("", config.as_yaml_dict()),
        tags=tags,
        resume_run_id=previous.parent_run_id if previous else None,
    )
    if previous is None:
        try:
            SearchState(
                parent.run_id,
                config.tracking.uri or "",
                config.tracking.experiment or "",
                config.as_yaml_dict(),
            ).save(experiment_dir)
            parent.client.log_dict(parent.run_id, config.as_yaml_dict(), "resolved_config.yaml")
        except BaseException:
            parent.finish("FAILED")  # never leave the run RUNNING
            raise
    return parent


if __name__ == "__main__":
    sys.exit(main())
