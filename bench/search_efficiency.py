"""What a whole search costs and finds, three ways, side by side on one machine.

Same config (space, seed, sampler, data, memory budget), one after another (`--no-stock`:
only 2 and 3, all that the ratios of 3 to 2 need):

1. stock: Ray Tune with Ray's own `OptunaSearch`, as a user would write it by hand: the
   trainable raises on out of memory, so such a trial is an error (Optuna: FAIL).
2. pipeline without early stopping or memory prediction (`search.early_stopping=null
   search.predict_oom=false`): OOMs are pruned and the monotone rule skips configs that
   need at least as much memory as one that ran out.
3. pipeline with both on (`search.early_stopping` as in the config, or the default rungs).

Columns: wall seconds; trials started (Tune trials); stopped early; OOMs that ran and
configs never started because they were predicted to run out; seconds spent in trials
that ended off the front; hypervolume of the final front (the same bounds and reference
point for all three, the config's `search.hypervolume_bounds`); the share of suggestions
after the sampler's start-up phase that were infeasible (out of memory, run or predicted),
and of the trials started after it.

Then a bound: how short (3) could be at best while keeping (2)'s front whole, were every
trial off that front stopped at the first rung (`stopping_bound`). Early stopping cannot
beat it: the trials that make the front train all their epochs.

With `--seeds`, each run of the three uses the next seed (`search.seed`), so that the
medians and the mean of the paired ratios of (3) to (2) are over the sampler's paths, not
only over the noise of one path; without it every run uses the config's seed.

    python bench/search_efficiency.py [--config configs/cats_dogs.yaml] [--budget-mb 40]
        [--num-samples 16] [--repeats 3 | --seeds 0 1 2 ...] [--no-stock]
        [key.path=value ...]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pandas as pd

from analysis.load import frame_from_tune, trial_spans
from analysis.pareto import declared_bounds, hypervolume, mark_front
from analysis.same_work import pool_same_work
from search.cli import RunOptions
from search.config import SearchConfig, load_config
from search.devices import leave_out_slow_amp
from search.optuna_search import STARTED_ATTR, STATUS_ATTR, build_sampler, startup_trials
from trainables.metrics import DEFAULT_MIN_ACCURACY, METRICS
from trainables.settings import DEFAULT_EPOCHS

REPO = Path(__file__).resolve().parents[1]
INFEASIBLE = ("oom", "oom_predicted")
DEFAULT_EARLY_STOPPING = "{rungs: [1, 2, 4], keep: 0.5}"


@dataclass
class Outcome:
    name: str
    seconds: float
    started: float  # counts; a median of several runs may fall between two
    stopped_early: float
    oom_ran: float
    oom_not_started: float
    seconds_off_front: float
    seconds_on_front: float
    hypervolume: float
    infeasible_after_startup: float  # of the sampler's suggestions
    infeasible_started_after_startup: float  # of the trials Tune started
    # (wall seconds since the search's command started, hypervolume of the trials ended by
    # then), after each trial's end: how the front grew; not part of the medians
    curve: tuple[tuple[float, float], ...] = field(default=(), repr=False)

    def hypervolume_by(self, seconds: float) -> float:
        """The hypervolume of the trials that had ended `seconds` after the command started."""
        reached = [volume for at, volume in self.curve if at <= seconds]
        return reached[-1] if reached else 0.0

    def searched_until(self) -> float:
        """When the last trial ended: wall seconds since the command started."""
        return self.curve[-1][0] if self.curve else self.seconds

    def seconds_to_reach(self, volume: float) -> float:
        """When the front first had `volume`: wall seconds since the command started."""
        return next((at for at, reached in self.curve if reached >= volume), math.inf)

    def cells(self) -> list[str]:
        return [
            self.name,
            f"{self.seconds:.0f}",
            f"{self.started:g}",
            f"{self.stopped_early:g}",
            f"{self.oom_ran:g} / {self.oom_not_started:g}",
            f"{self.seconds_off_front:.0f}",
            f"{self.hypervolume:.4f}",
            f"{self.infeasible_after_startup:.2f}",
            f"{self.infeasible_started_after_startup:.2f}",
        ]


HEADINGS = [
    "search",
    "wall s",
    "started",
    "stopped early",
    "OOM ran / not started",
    "s off the front",
    "hypervolume",
    "infeasible after start-up: suggested",
    "started",
]


def run_pipeline(name: str, arguments: list[str], config: SearchConfig, workdir: Path) -> Outcome:
    command = [sys.executable, "-m", "search.run", "--name", name, *arguments]
    launched, started = time.time(), time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(command, cwd=workdir, env=env, check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    experiment = workdir / "ray_results" / name
    trials = pd.read_csv(experiment / "report" / "trials.csv")
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{experiment / 'optuna.db'}")
    statuses = [
        (t.user_attrs.get(STATUS_ATTR, "failed"), t.user_attrs.get(STARTED_ATTR, True))
        for t in study.trials
    ]
    spans = trial_spans(experiment)
    return summarise(name, seconds, trials, spans, statuses, config, launched)


def stock_trial(config: dict[str, Any], data: Any) -> None:
    """The trainable as a user writes it: report each epoch, an out-of-memory error raises."""
    import torch
    from ray import tune

    from trainables.classifier import fit_classifier
    from trainables.settings import TrainSettings

    def report(metrics: dict[str, Any], checkpoint_dir: Path | None) -> None:
        if metrics["status"] == "oom":
            raise MemoryError(metrics["status_detail"])
        if metrics["status"] != "ok":
            raise RuntimeError(f"{metrics['status']}: {metrics['status_detail']}")
        tune.report(metrics)

    torch.set_num_threads(max(1, int(tune.get_context().get_trial_resources().head_cpus)))
    fit_classifier(TrainSettings.from_config(config), data, report)


def run_stock(config: SearchConfig, workdir: Path, name: str) -> Outcome:
    import ray
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    from trainables.data import prepare_data

    search = config.search
    storage = optuna.storages.RDBStorage(f"sqlite:///{workdir / 'stock-optuna.db'}")
    searcher = OptunaSearch(
        metric=list(config.objectives),
        mode=list(config.objectives.values()),
        sampler=build_sampler(search.sampler, search.num_samples, search.seed),
        storage=storage,
        study_name="stock",
    )
    data = prepare_data(config.data)
    launched, started = time.time(), time.perf_counter()
    # Tune's default TensorBoard logger warns for every NaN it is given; the trainable
    # reports NaN gaps between scorings on purpose
    logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)
    ray.init(include_dashboard=False, log_to_driver=False)
    config = config.with_cards(int(ray.cluster_resources().get("GPU", 0)))  # auto, as the CLI
    # the space the CLI samples on this machine (AMP left out where this CPU emulates bf16)
    config = leave_out_slow_amp(config, RunOptions(run_name=None, address=None, resume=False))
    space = {key: param.to_tune() for key, param in config.space.items()}
    resources = {"cpu": config.resources.cpu, "gpu": config.resources.gpu_share}
    try:
        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(stock_trial, data=data), resources),
            param_space={**config.train_config(), **space},
            tune_config=tune.TuneConfig(
                search_alg=searcher,
                num_samples=search.num_samples,
                max_concurrent_trials=search.max_concurrent_trials,
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                name="stock",
                storage_path=str(workdir / "ray_results"),
                failure_config=tune.FailureConfig(max_failures=0),
                verbose=0,
            ),
        )
        tuner.fit()
    finally:
        ray.shutdown()
    seconds = time.perf_counter() - started
    experiment = workdir / "ray_results" / "stock"
    frame = frame_from_tune(experiment, tuple(METRICS))
    for index, row in frame.iterrows():  # an error: the trainable's OOM, or something else
        if row["status"] == "error" and "MemoryError" in str(row.get("status_detail", "")):
            frame.loc[index, "status"] = "oom"
    study = optuna.load_study(study_name="stock", storage=storage)
    # A raised trial is FAIL to Optuna: out of memory here (or diverged, which is rare).
    statuses = [
        ("oom" if t.state == optuna.trial.TrialState.FAIL else "ok", True) for t in study.trials
    ]
    return summarise(name, seconds, frame, trial_spans(experiment), statuses, config, launched)


def summarise(
    name: str,
    seconds: float,
    trials: pd.DataFrame,
    spans: dict[str, tuple[float, float]],  # trial -> (start, end), seconds since the epoch
    suggestion_statuses: list[tuple[str, bool]],  # (status, started) in the order suggested
    config: SearchConfig,
    launched: float,  # when the search's command started, seconds since the epoch
) -> Outcome:
    objectives = dict(config.objectives)
    trials = pool_same_work(trials)  # one speed per work, as on the search's own front
    bounds = declared_bounds(trials, objectives, dict(config.search.hypervolume_bounds) or None)
    marked = mark_front(trials, objectives, DEFAULT_MIN_ACCURACY)
    started = marked[~marked["trial_id"].astype(str).str.startswith("skipped-")]
    off_front = started[~started["is_pareto"].fillna(False).astype(bool)]
    after = suggestion_statuses[startup_trials(config.search.sampler, config.search.num_samples) :]
    durations = {trial: end - start for trial, (start, end) in spans.items()}
    ended = trials["trial_id"].astype(str).map({t: end for t, (_, end) in spans.items()})
    curve = tuple(
        (at - launched, hypervolume(trials[ended <= at], objectives, bounds, DEFAULT_MIN_ACCURACY))
        for at in sorted(set(ended.dropna()))
    )
    return Outcome(
        name=name,
        seconds=seconds,
        started=len(started),
        stopped_early=int((trials["status"] == "stopped_early").sum()),
        oom_ran=int((started["status"] == "oom").sum()),
        oom_not_started=int((trials["status"] == "oom_predicted").sum()),
        seconds_off_front=sum(durations.get(str(t), 0.0) for t in off_front["trial_id"]),
        seconds_on_front=sum(durations.values())
        - sum(durations.get(str(t), 0.0) for t in off_front["trial_id"]),
        hypervolume=hypervolume(trials, objectives, bounds, DEFAULT_MIN_ACCURACY),
        infeasible_after_startup=_share_infeasible(after),
        infeasible_started_after_startup=_share_infeasible([s for s in after if s[1]]),
        curve=curve,
    )


def stopping_bound(outcome: Outcome, first_rung_share: float, concurrency: int) -> float:
    """The wall seconds of `outcome`'s search had every trial off its front stopped at the
    first rung (`first_rung_share` of its epochs) and every front trial run whole: the
    search's fixed part (start-up, report: wall minus trial seconds over the trials run at
    a time) plus the trial seconds left, `concurrency` at a time."""
    trials = outcome.seconds_on_front + outcome.seconds_off_front
    fixed = outcome.seconds - trials / concurrency
    return fixed + (outcome.seconds_on_front + first_rung_share * outcome.seconds_off_front) / (
        concurrency
    )


def _ratio(value: float, to: float) -> float:
    """`value / to`, inf where `to` is 0 (a front of nothing yet) and `value` is not."""
    if to == 0:
        return math.nan if value == 0 else math.inf
    return value / to


def _share_infeasible(statuses: list[tuple[str, bool]]) -> float:
    return sum(status in INFEASIBLE for status, _ in statuses) / len(statuses) if statuses else 0.0


def render(outcomes: list[Outcome]) -> str:
    rows = [HEADINGS, *(outcome.cells() for outcome in outcomes)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADINGS))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"))
    parser.add_argument("--budget-mb", type=float, default=40,
                        help="resources.memory_budget_mb: MiB per trial")  # fmt: skip
    parser.add_argument("--num-samples", type=int, default=16, help="trials per search")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each search")
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="one run of each search per seed (search.seed), instead of "
                        "--repeats runs with the config's seed")  # fmt: skip
    parser.add_argument("--no-stock", action="store_true",
                        help="run only (2) and (3), all the ratios of (3) to (2) need")  # fmt: skip
    parser.add_argument("overrides", nargs="*", metavar="key.path=value",
                        help="config overrides for all three searches")  # fmt: skip
    args = parser.parse_args()
    overrides = [
        f"resources.memory_budget_mb={args.budget_mb}",
        f"search.num_samples={args.num_samples}",
        *args.overrides,
    ]
    config = load_config(args.config, overrides)
    early = (
        [] if config.search.early_stopping else [f"search.early_stopping={DEFAULT_EARLY_STOPPING}"]
    )
    base = ["--config", str(Path(args.config).resolve()), *overrides]
    runs: dict[str, list[Outcome]] = (
        {"off": [], "on": []} if args.no_stock else {"stock": [], "off": [], "on": []}
    )
    seeds: list[int | None] = list(args.seeds) if args.seeds else [None] * args.repeats
    print(f"{config.name}: {args.num_samples} trials, {args.budget_mb:g} MiB per trial, "
          f"{len(seeds)} run(s) of each, interleaved"
          + (f", seeds {', '.join(map(str, args.seeds))}" if args.seeds else ""))  # fmt: skip
    for repeat, seed in enumerate(seeds, start=1):
        seeded = [] if seed is None else [f"search.seed={seed}"]
        run_config = load_config(args.config, [*overrides, *seeded])
        with tempfile.TemporaryDirectory(prefix="search-efficiency-") as directory:
            workdir = Path(directory)
            if "stock" in runs:
                runs["stock"].append(
                    run_stock(run_config, workdir, f"1 stock Tune + OptunaSearch #{repeat}")
                )
            off = [*base, *seeded, "search.early_stopping=null", "search.predict_oom=false"]
            on = [*base, *seeded, *early]
            runs["off"].append(run_pipeline("2-pipeline-off", off, config, workdir))
            runs["on"].append(run_pipeline("3-pipeline-on", on, config, workdir))
        for key in runs:
            runs[key][-1].name = f"{runs[key][-1].name.split(' #')[0]} #{repeat}"
        print(render([outcome for group in zip(*runs.values(), strict=True) for outcome in group]),
              flush=True)  # fmt: skip
    medians = {key: median_outcome(group) for key, group in runs.items()}
    off, on = medians["off"], medians["on"]
    print()
    print(render(list(medians.values())))
    print()
    print(f"(3) / (2), medians: hypervolume {on.hypervolume / off.hypervolume:.3f}, "
          f"wall time {on.seconds / off.seconds:.3f}")  # fmt: skip
    pairs = list(zip(runs["off"], runs["on"], strict=True))
    print(f"(3) / (2), mean of the {len(pairs)} runs' own ratios: hypervolume "
          f"{statistics.mean(_ratio(b.hypervolume, a.hypervolume) for a, b in pairs):.3f}, "
          f"wall time {statistics.mean(b.seconds / a.seconds for a, b in pairs):.3f}")  # fmt: skip
    # the same searches as anytime searches: what each front held at a given wall time
    # (3)'s search ended with its last trial (its report came after): (2)'s front then
    equal = [_ratio(b.hypervolume, a.hypervolume_by(b.searched_until())) for a, b in pairs]
    reach = [b.seconds_to_reach(0.95 * a.hypervolume) / a.seconds for a, b in pairs]
    print(
        f"(3)'s hypervolume / (2)'s when (3)'s last trial ended (equal time), per run: "
        f"{', '.join(f'{r:.2f}' for r in equal)}; median {statistics.median(equal):.3f}"
    )
    print(f"when (3)'s front first held 95% of (2)'s final hypervolume, in (2)'s wall times, "
          f"per run: {', '.join(f'{r:.2f}' for r in reach)} (inf: never)")  # fmt: skip
    stopping = load_config(args.config, [*overrides, *early]).search.early_stopping
    assert stopping is not None
    share = stopping.rungs[0] / config.train.get("epochs", DEFAULT_EPOCHS)
    per_node = max(1, int((os.cpu_count() or 1) // config.resources.cpu))
    concurrency = config.search.max_concurrent_trials or per_node
    bounds = [stopping_bound(o, share, concurrency) / o.seconds for o in runs["off"]]
    print(f"at best, with (2)'s front kept whole and every other trial stopped at epoch "
          f"{stopping.rungs[0]}: wall time {statistics.median(bounds):.3f} of (2)'s "
          f"(median; runs {', '.join(f'{b:.2f}' for b in bounds)})")  # fmt: skip
    over_budget = sum(o.oom_ran + o.oom_not_started for o in runs["on"])
    if over_budget:
        never = sum(o.oom_not_started for o in runs["on"])
        print(f"(3): {never} of {over_budget} over-budget configs never started")
    stock = medians.get("stock")
    if stock is not None and stock.infeasible_after_startup:
        stock_share = stock.infeasible_after_startup  # stock starts all it is given
        print(f"infeasible share after start-up, (3) / (1), medians: suggested "
              f"{on.infeasible_after_startup / stock_share:.2f}, "
              f"started {on.infeasible_started_after_startup / stock_share:.2f}")  # fmt: skip


def median_outcome(outcomes: list[Outcome]) -> Outcome:
    """Each column's median over the runs of one kind of search."""
    fields = [name for name in Outcome.__dataclass_fields__ if name not in ("name", "curve")]
    values = {name: statistics.median(getattr(o, name) for o in outcomes) for name in fields}
    label = outcomes[0].name.split(" #")[0]
    return Outcome(name=f"{label} (median of {len(outcomes)})", **values)


if __name__ == "__main__":
    main()
