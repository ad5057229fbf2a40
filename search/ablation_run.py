"""Running a search's ablations (`search.ablation`, planned by `search.ablation`): the
trials to ablate read off the finished search, the plan saved, and the ablations' searcher
(`search.ablation_searcher.ScreenedAblations`) running each of its configs once, a base's
noise floor first where it is screened, in `ablations/` of the search's folder (resumed
there)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import ray
from ray import tune

from analysis.load import frame_from_tune
from analysis.pareto import balanced_front
from analysis.report import ranked
from search.ablation import (
    KNEE_CANDIDATES,
    ScreenedOrder,
    candidate_points,
    describe_order,
    floor_accuracy,
    floor_key,
)
from search.ablation_searcher import ScreenedAblations
from search.config import SearchConfig
from search.experiment import has_saved_state
from search.held_ends import HoldsEnds
from search.recovery import FitResult, ended, fit_with_recovery
from search.tuner import (
    restore_tuner,
    run_config,
    split_sizes,
    trainable,
    trial_dirname,
    trial_name,
)
from trainables.data import PreparedData
from trainables.metrics import ABLATION, METRICS, NOISE_FLOOR

ABLATIONS_DIR = "ablations"  # in the search's folder: Tune's experiment of the ablations
PLAN_FILE = "plan.json"  # the points, saved before the first ablation trial


def trial_config(experiment_dir: Path, trial_id: str) -> dict[str, Any]:
    """The config a trial of the search ran with, as Tune saved it."""
    return json.loads((experiment_dir / f"trial_{trial_id}" / "params.json").read_text())


def with_every_key(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each point with every key some point sets, None where it sets none: a trial's config
    then holds each setting the others' do (Tune's generator once filled a key a point left
    out by sampling, which gave the noise-floor runs another ablation's baseline)."""
    keys = dict.fromkeys(key for point in points for key in point)
    return [{key: point.get(key) for key in keys} for point in points]


def has_ablations(experiment_dir: Path) -> bool:
    """Whether the search's ablations have started (and can be resumed)."""
    return has_saved_state(experiment_dir / ABLATIONS_DIR)


def ablation_tuner(
    config: SearchConfig,
    data: PreparedData,
    order: ScreenedOrder,
    experiment_dir: Path,
    callbacks: Sequence[tune.Callback],
    say: Callable[[str], None] | None = None,
) -> tune.Tuner:
    """The ablations' searcher runs each config of `order` once: no sampler, no early
    stopping; the search's resources, retries and loggers, in `ablations/` of its folder;
    ends held while a floor runs (`search.held_ends`; not where trials pack by memory, as
    in the search, nor where more trials may run at once than the cluster's `slots`: a
    floor run waiting for the held run's resources would never start)."""
    at_once = config.search.max_concurrent_trials
    searcher = ScreenedAblations(order, at_once, say)
    scheduler = HoldsEnds()
    if not config.resources.packs_by_memory and at_once is not None and at_once <= slots(config):
        scheduler.keep_processes(searcher)
    return tune.Tuner(
        trainable(config, data, compared=False, search_name=experiment_dir.name),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=order.most_trials,
            reuse_actors=True,
            trial_dirname_creator=trial_dirname,
            trial_name_creator=trial_name,
        ),
        run_config=run_config(config, ABLATIONS_DIR, list(callbacks), str(experiment_dir)),
    )


def slots(config: SearchConfig) -> int:
    """How many trials the live nodes of Ray's cluster run at once with the config's
    resources (each node's CPUs, and cards where trials take a share of one)."""
    cpu, gpu = config.resources.cpu, config.resources.gpu_share
    total = 0
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        resources = node.get("Resources", {})
        fits = int(resources.get("CPU", 0) / cpu + 1e-9)  # a share's float error aside
        if gpu > 0:
            fits = min(fits, int(resources.get("GPU", 0) / gpu + 1e-9))
        total += fits
    return total


def save_plan(experiment_dir: Path, order: ScreenedOrder) -> None:
    """The order, saved before the first ablation trial (what a resumed search expects)."""
    folder = experiment_dir / ABLATIONS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    saved = {"candidates": [list(candidate) for candidate in order.candidates],
             "around": order.around, "screened": order.screened,
             "min_accuracy": order.min_accuracy}  # fmt: skip
    (folder / PLAN_FILE).write_text(json.dumps(saved, indent=1, default=str))


def saved_order(experiment_dir: Path) -> ScreenedOrder:
    """The saved order; a plan saved before floors were screened (a list of the configs, in
    order) as an unscreened one."""
    saved = json.loads((experiment_dir / ABLATIONS_DIR / PLAN_FILE).read_text())
    if isinstance(saved, list):
        return ScreenedOrder((tuple(saved),), screened=False)
    return ScreenedOrder(
        tuple(tuple(candidate) for candidate in saved["candidates"]),
        around=saved["around"], screened=saved["screened"], min_accuracy=saved["min_accuracy"],
    )  # fmt: skip


def trials_expected(order: ScreenedOrder, grid: tune.ResultGrid) -> int:
    """How many trials the order runs, given the floor runs that ended in `grid`; one more
    than it decided where a floor it waits for has not ended (an interrupted fit)."""
    floors: dict[tuple[str, int], float | None] = {}
    for result in grid:
        point = result.config or {}
        if point.get(ABLATION) == NOISE_FLOOR and ended(result):
            floors[floor_key(point)] = None if result.error else floor_accuracy(result.metrics)
    decided, final = order.decided(floors)
    return len(decided) + (0 if final else 1)


def bases_of(
    frame: pd.DataFrame,
    experiment_dir: Path,
    config: SearchConfig,
    min_accuracy: float,
    scored_on: Mapping[str, int] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The trials to ablate, as (trial id, config): the knee (and where its floor is
    screened, the next front trials that may take its place, `KNEE_CANDIDATES` in all), or
    every front trial, in order of balance (the knee first; `scored_on`: the splits' sizes,
    so that an objective is weighed no finer than its noise, `analysis.pareto.balanced_front`);
    a config run with several seeds is its first trial."""
    marked, _ = ranked(frame, config.objectives, min_accuracy)
    order = balanced_front(marked, config.objectives, scored_on)
    plan = config.search.ablation
    if plan is None or plan.around == "knee":
        order = order[: KNEE_CANDIDATES if plan is not None and plan.skip_seed_fragile else 1]
    trial_ids = [str(marked.loc[index, "trial_id"]).split("+")[0] for index in order]
    return [(trial_id, trial_config(experiment_dir, trial_id)) for trial_id in trial_ids]


def screened_order(
    bases: Sequence[tuple[str, Mapping[str, Any]]],
    config: SearchConfig,
    min_accuracy: float,
) -> ScreenedOrder:
    """The ablations' order for `bases` (`bases_of`): around the knee each candidate with the
    plan's trials (one is ablated), around the front the trials shared out in turn."""
    plan = config.search.ablation
    assert plan is not None
    screened = plan.skip_seed_fragile and min_accuracy is not None
    candidates = candidate_points(
        bases, config.space, plan, config.resources.gpu_share > 0,
        each_its_own_room=plan.around == "knee", floor_first=screened,
    )  # fmt: skip
    every = iter(with_every_key([point for points in candidates for point in points]))
    shaped = tuple(tuple(next(every) for _ in points) for points in candidates)
    return ScreenedOrder(shaped, plan.around, screened, min_accuracy)


def run_ablations(
    config: SearchConfig,
    experiment_dir: Path,
    data: PreparedData,
    callbacks: Sequence[tune.Callback],
    min_accuracy: float,
    automatic_resumes: int,
    say: Callable[[str], None],
) -> FitResult | None:
    """The finished search's ablations, planned, saved and run (or resumed where they
    started); None where there are none to run (`search.ablation` null, no front)."""
    plan = config.search.ablation
    if plan is None:
        return None

    def restored() -> tune.Tuner:
        return restore_tuner(config, data, experiment_dir / ABLATIONS_DIR, compared=False,
                             search_name=experiment_dir.name)  # fmt: skip

    if has_ablations(experiment_dir):
        order = saved_order(experiment_dir)
        say(f"Ablations: resuming {describe_order(order)}")
        first = restored
    else:
        frame = frame_from_tune(experiment_dir, tuple(METRICS))
        scored_on = split_sizes(config, data)
        bases = (
            bases_of(frame, experiment_dir, config, min_accuracy, scored_on) if len(frame) else []
        )
        order = screened_order(bases, config, min_accuracy)
        if not order.candidates:
            say("Ablations: none (no trial on the front, or no setting to change)")
            return None
        save_plan(experiment_dir, order)
        say(f"Ablations: {describe_order(order)}")

        def first() -> tune.Tuner:
            return ablation_tuner(config, data, order, experiment_dir, callbacks, say)

    return fit_with_recovery(
        first, restored, lambda grid: trials_expected(order, grid), automatic_resumes, say
    )
