"""Build the Ray Tune `Tuner` for a config: resources, param space, searcher, run config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

from search.config import SearchConfig
from search.early_stopping import EarlyStoppedStatus, ParetoEarlyStopping
from search.feasibility import CpuMeterProbe, MemoryModel
from search.held_ends import HoldsEnds
from search.packing import PackedResources
from search.progress import ProgressTable
from search.searcher import build_sampler, build_searcher
from search.space import grid_points
from search.trainable import classifier_trial
from trainables import PreparedData
from trainables.metrics import min_accuracy_for
from trainables.settings import TrainSettings
from trainables.techniques import column_of


def param_space(config: SearchConfig) -> dict[str, Any]:
    """Fixed train settings plus a Tune domain for each sampled one."""
    return {
        **config.train_config(),
        **{key: param.to_tune() for key, param in config.space.items()},
    }


def trainable(
    config: SearchConfig, data: PreparedData, compared: bool = True, search_name: str = ""
) -> Any:
    """The trial function with the prepared data (object store), the epochs whose reports
    early stopping compares (`compared` False: none, for trials it never sees), and the
    trial's resources: packed by memory, those the memory model of search `search_name`
    gives its config (`search.packing`). The rungs travel here, not in the param space,
    which `Tuner.restore` requires unchanged from the search's start."""
    cpu, gpu = config.resources.cpu, config.resources.gpu_share
    resources: Any = {"cpu": cpu, "gpu": gpu}
    if config.resources.packs_by_memory:
        resources = PackedResources(search_name, cpu, default_gpu=gpu)
    rungs = config.rungs() if compared else ()
    with_data = tune.with_parameters(classifier_trial, data=data, rungs=rungs)
    return tune.with_resources(with_data, resources)


OPTUNA_STORAGE = "optuna.db"  # the study, next to Tune's state: it survives a restart


# Short headers of the progress table's metrics (its settings': `trainables.techniques.
# column_of`); the rest keep their names.
METRIC_COLUMNS = {
    "throughput": "img/s",
    "best_val_acc": "best_acc",
    "gen_gap": "gap",
    "status": "outcome",  # Tune has a status column of its own
}


def progress_columns(config: SearchConfig) -> tuple[dict[str, str], dict[str, str]]:
    """(sampled setting -> header, metric -> header) of the progress table."""
    settings = {key: column_of(key) for key in config.space}
    shown = dict.fromkeys(["epoch", *config.objectives, "status"])
    return settings, {name: METRIC_COLUMNS.get(name, name) for name in shown}


def progress_table(config: SearchConfig) -> ProgressTable:
    """The table printed while the search runs: the sampled settings, the epoch and the
    objectives, under short headers, so that it fits a wide terminal (the ranked table at
    the end has everything; `search.progress`).

    Ray's newer output engine ignores a reporter, so `search.run` selects the table engine
    (RAY_AIR_NEW_OUTPUT=0) before building the run config.
    """
    settings, metrics = progress_columns(config)
    return ProgressTable(settings, metrics)


def memory_model(
    config: SearchConfig, num_classes: int, search_name: str = ""
) -> MemoryModel | None:
    """What predicts a suggestion's memory: on CPU the trials' own meter, run at the driver;
    on GPUs a line through the reserved peaks the trials report, against the allocator limit
    they report; packing by memory, it sizes the shares of search `search_name`, with the
    meter's line scaled to the card before two of a kind have run."""
    if not config.search.predict_oom:
        return None
    on_gpu, packs = config.resources.gpu_share > 0, config.resources.packs_by_memory
    # On a card the meter costs the driver seconds a kind of config (ResNet-50 at 224 px:
    # 2-13 s on 2 cores): paid where it sizes shares, not for a fixed share.
    return MemoryModel(
        probe=CpuMeterProbe(num_classes) if packs or not on_gpu else None, on_gpu=on_gpu,
        packs_search=search_name if packs else "",
    )  # fmt: skip


def split_sizes(config: SearchConfig, data: PreparedData) -> dict[str, int]:
    """Images of the splits each objective is scored on: what its standard error is of."""
    train_eval = TrainSettings.from_config(config.train).train_eval_size
    return {"val": len(data.val), "test": len(data.test),
            "train_eval": min(train_eval, len(data.train))}  # fmt: skip


def build_tuner(
    config: SearchConfig,
    data: PreparedData,
    run_name: str,
    callbacks: list[tune.Callback],
) -> tune.Tuner:
    search = config.search
    experiment_dir = Path(config.run.storage_path) / run_name
    experiment_dir.mkdir(parents=True, exist_ok=True)
    # Nothing to sample: Tune's own generator runs the fixed config num_samples times.
    searcher = None
    if config.space:
        searcher = build_searcher(
            config.space,
            config.objectives,
            build_sampler(search.sampler, search.num_samples, search.seed),
            grid=grid_points(config.space),
            fixed_config=config.train_config(),
            storage=f"sqlite:///{experiment_dir / OPTUNA_STORAGE}",
            study_name=run_name,
            repeats=search.repeats,
            memory=memory_model(config, data.num_classes, run_name),
            min_accuracy=min_accuracy_for(data.num_classes),  # the report's front's too
            lag=search.effective_lag,
            trials=search.num_samples,
        )
    scheduler: HoldsEnds | None = None
    if search.early_stopping is not None:
        scheduler = ParetoEarlyStopping(
            config.objectives,
            rungs=search.early_stopping.rungs,
            keep=search.early_stopping.keep,
            min_peers=search.early_stopping.min_peers,
            min_accuracy=min_accuracy_for(data.num_classes),  # the report's, so the front's
            split_sizes=split_sizes(config, data),  # a trial is stopped on evidence
            ahead_on=search.early_stopping.effective_ahead_on(config.objectives),
            slow_start_rungs=search.early_stopping.slow_start_rungs,
            at_chance_after=search.early_stopping.at_chance_after,
            lag=search.effective_lag if searcher is not None else None,
        )
        callbacks = [EarlyStoppedStatus(scheduler), *callbacks]  # first: it marks the result
    elif searcher is not None and search.effective_lag is not None:
        scheduler = HoldsEnds()
    # With a lag no slot idles while another frees; packed by memory, trials ask for shares
    # of their own, a held trial's share could be what the next trial waits for, and a
    # freed process serves only a trial of its share anyway.
    if scheduler is not None and searcher is not None and not config.resources.packs_by_memory:
        scheduler.keep_processes(searcher)
    return tune.Tuner(
        trainable(config, data, search_name=run_name),
        param_space=param_space(config),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=search.num_samples,
            max_concurrent_trials=search.max_concurrent_trials,
            # A finished trial's process takes the next trial that asks for the same
            # resources (all of a search's trials, but packed by memory only those of the
            # same share): seconds saved per trial on small searches.
            reuse_actors=True,
            trial_dirname_creator=trial_dirname,
            trial_name_creator=trial_name,
        ),
        run_config=run_config(config, run_name, callbacks),
    )


def trial_name(trial: tune.experiment.Trial) -> str:
    """A trial's name in Tune's logs and folders: its id, as the tables and MLflow name it."""
    return str(trial.trial_id)


def trial_dirname(trial: tune.experiment.Trial) -> str:
    """A trial's folder: `trial_<id>` (what `analysis.load` and the ablations read)."""
    return f"trial_{trial.trial_id}"


def run_config(
    config: SearchConfig,
    run_name: str,
    callbacks: list[tune.Callback],
    storage_path: str | None = None,
) -> tune.RunConfig:
    """`storage_path`: where the experiment's folder goes (default: `run.storage_path`;
    the ablations go into the search's own folder)."""
    # Per-trial result.json and progress.csv are written explicitly; Tune's automatic
    # loggers are turned off by search.run because its TensorBoard logger prints a warning
    # for every trial that reports time_to_target_s = inf (MLflow is the dashboard here).
    return tune.RunConfig(
        name=run_name,
        # absolute: trials run in other directories
        storage_path=storage_path or config.run.storage_path,
        failure_config=tune.FailureConfig(max_failures=config.run.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=config.run.checkpoints_to_keep),
        callbacks=[*callbacks, JsonLoggerCallback(), CSVLoggerCallback()],
        progress_reporter=progress_table(config),
        verbose=1,  # the table only, not every result
    )


def restore_tuner(
    config: SearchConfig,
    data: PreparedData,
    experiment_dir: Path,
    compared: bool = True,
    search_name: str | None = None,
) -> tune.Tuner:
    """Continue an interrupted search: finished trials are kept, unfinished ones resume.
    The param space is the one the search started with, as Tune saved it (it holds no
    object references to refresh): a search started before a setting was renamed keeps
    its keys, which the trials still accept (`trainables.settings.RENAMED_KEYS`).
    `compared` False: trials early stopping never compares (the ablations); `search_name`:
    the search whose memory model packs its trials (by default the folder's name)."""
    return tune.Tuner.restore(
        str(experiment_dir),
        trainable=trainable(config, data, compared, search_name or experiment_dir.name),
        resume_unfinished=True,
        resume_errored=True,
    )
