"""One whole search once its config is valid and Ray and the data are ready
(`search.startup`): the Tuner fitted (and resumed after Ray's memory monitor), the report
written, and every MLflow run left FINISHED or FAILED. `search.run` checks the command line
before any of it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import ray
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

from analysis.flat import flatten
from analysis.load import frame_from_tune, histories_from_tune, trial_row
from analysis.report import (
    GPU_SHARE_PARAM,
    LEFT_OUT_PARAM_PREFIX,
    NUM_CLASSES_TAG,
    RESULTS_DIR_TAG,
    build_report,
    publish,
    split_size_tags,
)
from analysis.tracking_server import is_server
from search.ablation_run import ABLATIONS_DIR, run_ablations
from search.background import in_background
from search.cli import (
    EXIT_INTERRUPTED,
    EXIT_NOTHING_TRAINED,
    EXIT_STOPPED,
    RunOptions,
    resume_command,
    say,
)
from search.config import SearchConfig
from search.console import mlflow_ui_command, runs_link, summary_table
from search.experiment import SearchState
from search.recovery import Outcome, fit_with_recovery
from search.skipped import skipped_suggestions
from search.tracking import (
    MlflowTrialCallback,
    ParentRun,
    git_commit,
    log_skipped,
    save_review_view,
    tag_ablated,
)
from search.tuner import OPTUNA_STORAGE, build_tuner, restore_tuner, split_sizes
from trainables.data import PreparedData
from trainables.metrics import METRICS, STATUS_ERROR, min_accuracy_for

METRIC_NAMES = tuple(METRICS)

AUTOMATIC_RESUMES = 2  # after Ray's memory monitor aborts a fit; then the user decides


def run_search(
    config: SearchConfig,
    experiment_dir: Path,
    options: RunOptions,
    data: PreparedData,
    owns_ray: bool = False,
) -> int:
    """The search, once Ray is up and the data ready (`search.startup.start`). `owns_ray`:
    this search started Ray, and shuts it down once the trials are done."""
    say(f"Data: {data.description}")
    parent = open_parent_run(config, experiment_dir, options.resume, data)
    try:
        callback = MlflowTrialCallback(
            config.tracking.uri or "",
            parent.experiment_id,
            parent.run_id,
            fixed_params=flatten("", {k: v for k, v in config.train_config().items()
                                      if k != "data"}),
        )  # fmt: skip
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
    except KeyboardInterrupt:  # a second Ctrl-C while Tune stopped, or one outside its loop
        end_unfinished(parent, config, experiment_dir, options, "the search was interrupted")
        return EXIT_INTERRUPTED
    except BaseException:
        end_unfinished(parent, config, experiment_dir, options, "the search failed")
        raise
    if result.outcome is Outcome.FINISHED:
        try:
            ablated = run_ablations(
                config, experiment_dir, data, [callback], min_accuracy_for(data.num_classes),
                AUTOMATIC_RESUMES, say,
            )  # fmt: skip
        except KeyboardInterrupt:
            end_unfinished(
                parent, config, experiment_dir, options, "the ablations were interrupted"
            )
            return EXIT_INTERRUPTED
        except BaseException:
            end_unfinished(parent, config, experiment_dir, options, "the ablations failed")
            raise
        if ablated is not None:
            result = ablated
    if result.outcome is not Outcome.FINISHED:
        reason = {
            Outcome.INTERRUPTED: f"the search was interrupted ({result.detail})",
            Outcome.HOST_MEMORY: (
                f"Ray's memory monitor killed trials {result.automatic_resumes + 1} times "
                f"({result.detail}); free memory or lower resources.memory_budget_mb / "
                "search.max_concurrent_trials"
            ),
        }[result.outcome]
        end_unfinished(parent, config, experiment_dir, options, reason)
        return EXIT_INTERRUPTED if result.outcome is Outcome.INTERRUPTED else EXIT_STOPPED
    # The report needs no Ray: its processes end meanwhile (a second or more, else paid
    # at exit).
    stopping = in_background(ray.shutdown, name="ray-shutdown") if owns_ray else None
    try:
        trained = report_and_finish(config, experiment_dir, parent, callback, data)
    except KeyboardInterrupt:
        parent.finish("FAILED")  # the trials' runs are finished; the report is not
        print("Stopped: interrupted while the report was written; the trials are done, and "
              f"continuing writes it: {continue_command(config, experiment_dir, options)}",
              file=sys.stderr)  # fmt: skip
        return EXIT_INTERRUPTED
    except BaseException:
        parent.finish("FAILED")  # the trials' runs are finished; the report is not
        raise
    finally:
        if stopping is not None:
            stopping.exception()  # waited for; a failure to stop is no failed search
    return 0 if trained else EXIT_NOTHING_TRAINED


def report_and_finish(
    config: SearchConfig,
    experiment_dir: Path,
    parent: ParentRun,
    callback: MlflowTrialCallback,
    data: PreparedData,
) -> bool:
    """The finished search's report, written and published to its MLflow run, the run
    FINISHED, and the summary and where to review it printed. False where no trial of the
    search trained (each raised, or its actor never started): the run is FAILED, and the
    console says where Ray's errors are."""
    frame = frame_from_tune(experiment_dir, METRIC_NAMES)
    tried = len(frame)  # the search's trials that left a folder with a result or an error
    trained = bool(tried) and bool((frame["status"] != STATUS_ERROR).any())
    ablations = frame_from_tune(experiment_dir / ABLATIONS_DIR, METRIC_NAMES)
    tag_ablated(parent, ablations)
    skipped = skipped_suggestions(
        f"sqlite:///{experiment_dir / OPTUNA_STORAGE}",
        experiment_dir.name,
        config.train_config(),
    )
    if skipped:
        log_skipped(parent, skipped, callback.fixed_params)
        rows = [trial_row(s.trial_id, s.config, s.metrics) for s in skipped]
        frame = pd.concat([frame, pd.DataFrame(rows)], ignore_index=True)
        count = f"{len(skipped)} suggestion{'s' if len(skipped) != 1 else ''}"
        say(f"Never started: {count} predicted to run out of memory (see the trials table).")
    if len(ablations):
        frame = pd.concat([frame, ablations], ignore_index=True)
    report = build_report(
        frame,
        config.objectives,
        experiment_dir / "report",
        title=experiment_dir.name,
        bounds=config.search.hypervolume_bounds or None,
        min_accuracy=min_accuracy_for(data.num_classes),
        histories=histories_from_tune(experiment_dir),
        on_gpu=config.resources.gpu_share > 0,
        left_out=config.left_out,
        split_sizes=split_sizes(config, data),
    )
    publish(parent.client, parent.run_id, report)
    parent.close_unfinished_trials("lost")  # trials whose runs died with an earlier driver
    parent.finish("FINISHED" if trained else "FAILED")
    say()
    say(summary_table(report.frame, list(config.space), list(config.objectives)))
    say()
    answer = report.ablation_answer()  # the report's first screen, also here
    for line in answer:
        say(line if line.startswith("Around trial") else f"  {line}")
    if answer:
        say()
    say(f"Results: {experiment_dir}")
    say(f"Report:  {experiment_dir / 'report' / 'report.html'}")
    say(f"Hypervolume of the front: {report.hypervolume:.4f}")
    say(f"MLflow:  {config.tracking.uri}")
    uri = config.tracking.uri or ""
    if not is_server(uri):  # a server's address is in the link below
        say(f"Review:  {mlflow_ui_command(uri)}")
    view = save_review_view(
        parent.client, parent.experiment_id, experiment_dir.name, list(config.objectives)
    )
    say(f"Runs:    {runs_link(uri, parent.experiment_id, view)}")
    if not trained:
        what = f"all {tried} raised" if tried else "none left a result (never started)"
        print(f"No trial trained: of the search's trials {what}. Ray's error for each is above, "
              f"and in the error.txt of its folder under {experiment_dir}.",
              file=sys.stderr)  # fmt: skip
    return trained


def end_unfinished(
    parent: ParentRun,
    config: SearchConfig,
    experiment_dir: Path,
    options: RunOptions,
    reason: str,
) -> None:
    """Leave no run RUNNING, and say how to continue: the command line that started it
    (a search started from Python: its config alone), resumed."""
    parent.close_unfinished_trials("interrupted")
    parent.finish("FAILED")
    print(f"Stopped: {reason}.", file=sys.stderr)
    command = continue_command(config, experiment_dir, options)
    print(f"To continue where it stopped: {command}", file=sys.stderr)


def continue_command(config: SearchConfig, experiment_dir: Path, options: RunOptions) -> str:
    """`--resume` of this search: its command line's (one started from Python: its config
    alone)."""
    arguments = options.arguments or ("--config", str(config.source))
    return resume_command(arguments, experiment_dir.name)


def open_parent_run(
    config: SearchConfig, experiment_dir: Path, resume: bool, data: PreparedData
) -> ParentRun:
    previous = SearchState.load(experiment_dir) if resume else None
    commit = git_commit(Path(__file__).resolve().parent)
    tags = {
        "data_source": data.source,
        "data": data.description[:5000],
        NUM_CLASSES_TAG: str(data.num_classes),  # the report's min accuracy comes from it
        RESULTS_DIR_TAG: str(experiment_dir.resolve()),  # the report alone writes there too
        # the images each accuracy is scored on: the noise the report's knee weighs
        **split_size_tags(split_sizes(config, data)),
    }
    if commit:
        tags[MLFLOW_GIT_COMMIT] = commit
    parent = ParentRun.start(
        tracking_uri=config.tracking.uri or "",
        experiment=config.tracking.experiment or config.name,
        run_name=experiment_dir.name,
        # the config as written (resources.gpu may say auto), the share its trials got, and
        # what was left out of its space on this machine
        params={
            **flatten("", config.as_yaml_dict()),
            GPU_SHARE_PARAM: config.resources.gpu_share,
            # the speed scale the search measured for its CPU trials (one written is above)
            **{
                f"train.speed_scale.{kind}": images_per_s
                for kind, images_per_s in (config.speed_scale or {}).items()
                if "speed_scale" not in config.train
            },
            **{f"{LEFT_OUT_PARAM_PREFIX}{key}": why for key, why in config.left_out.items()},
        },
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
                config.left_out,
                config.speed_scale,
            ).save(experiment_dir)
            parent.client.log_dict(parent.run_id, config.as_yaml_dict(), "resolved_config.yaml")
        except BaseException:
            parent.finish("FAILED")  # never leave the run RUNNING
            raise
    return parent
