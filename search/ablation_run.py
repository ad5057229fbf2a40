"""Running a search's ablations (`search.ablation`, planned by `search.ablation`): the
trials to ablate read off the finished search, the plan saved, and Tune's own generator
running each point once in `ablations/` of the search's folder (resumed there)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from ray import tune
from ray.tune.search import BasicVariantGenerator

from analysis.load import frame_from_tune
from analysis.pareto import balanced_front
from analysis.report import ranked
from search.ablation import ablation_points, describe
from search.config import SearchConfig
from search.experiment import has_saved_state
from search.recovery import FitResult, fit_with_recovery
from search.tuner import (
    restore_tuner,
    run_config,
    split_sizes,
    trainable,
    trial_dirname,
    trial_name,
)
from trainables.data import PreparedData
from trainables.metrics import METRICS

ABLATIONS_DIR = "ablations"  # in the search's folder: Tune's experiment of the ablations
PLAN_FILE = "plan.json"  # the points, saved before the first ablation trial


def trial_config(experiment_dir: Path, trial_id: str) -> dict[str, Any]:
    """The config a trial of the search ran with, as Tune saved it."""
    return json.loads((experiment_dir / f"trial_{trial_id}" / "params.json").read_text())


def param_space_of(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A param space that holds every point: a key that differs between the points is a
    choice among their values (each point sets it), one that does not is that value."""
    space: dict[str, Any] = {}
    for key in dict.fromkeys(key for point in points for key in point):
        values = {json.dumps(point.get(key), sort_keys=True): point.get(key) for point in points}
        space[key] = (
            tune.choice(list(values.values())) if len(values) > 1 else next(iter(values.values()))
        )
    return space


def with_every_key(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each point with every key some point sets, None where it sets none: Tune fills a key
    a point leaves out by sampling the param space, which gave the noise-floor runs and the
    learning rate's ablation another ablation's baseline to be timed against."""
    keys = dict.fromkeys(key for point in points for key in point)
    return [{key: point.get(key) for key in keys} for point in points]


def has_ablations(experiment_dir: Path) -> bool:
    """Whether the search's ablations have started (and can be resumed)."""
    return has_saved_state(experiment_dir / ABLATIONS_DIR)


def ablation_tuner(
    config: SearchConfig,
    data: PreparedData,
    points: Sequence[Mapping[str, Any]],
    experiment_dir: Path,
    callbacks: Sequence[tune.Callback],
) -> tune.Tuner:
    """Tune's own generator runs each point once: no sampler, no early stopping; the
    search's resources, retries and loggers, in `ablations/` of its folder."""
    points = with_every_key(points)
    return tune.Tuner(
        trainable(config, data, compared=False, search_name=experiment_dir.name),
        param_space=param_space_of(points),
        tune_config=tune.TuneConfig(
            search_alg=BasicVariantGenerator(
                points_to_evaluate=[dict(p) for p in points],
                max_concurrent=config.search.max_concurrent_trials or 0,  # 0: as resources allow
            ),
            num_samples=len(points),
            reuse_actors=True,
            trial_dirname_creator=trial_dirname,
            trial_name_creator=trial_name,
        ),
        run_config=run_config(config, ABLATIONS_DIR, list(callbacks), str(experiment_dir)),
    )


def expected_trials(experiment_dir: Path) -> int:
    """How many ablation trials a started plan holds (its saved points)."""
    return len(json.loads((experiment_dir / ABLATIONS_DIR / PLAN_FILE).read_text()))


def save_plan(experiment_dir: Path, points: Sequence[Mapping[str, Any]]) -> None:
    folder = experiment_dir / ABLATIONS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / PLAN_FILE).write_text(json.dumps(list(points), indent=1, default=str))


def bases_of(
    frame: pd.DataFrame,
    experiment_dir: Path,
    config: SearchConfig,
    min_accuracy: float,
    scored_on: Mapping[str, int] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The trials to ablate, as (trial id, config): the knee, or every front trial in
    order of balance (the knee first; `scored_on`: the splits' sizes, so that an objective
    is weighed no finer than its noise, `analysis.pareto.balanced_front`); a config run with
    several seeds is its first trial."""
    marked, _ = ranked(frame, config.objectives, min_accuracy)
    order = balanced_front(marked, config.objectives, scored_on)
    plan = config.search.ablation
    if plan is None or plan.around == "knee":
        order = order[:1]
    trial_ids = [str(marked.loc[index, "trial_id"]).split("+")[0] for index in order]
    return [(trial_id, trial_config(experiment_dir, trial_id)) for trial_id in trial_ids]


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
        expected = expected_trials(experiment_dir)
        say(f"Ablations: resuming the {expected} planned")
        first = restored
    else:
        frame = frame_from_tune(experiment_dir, tuple(METRICS))
        scored_on = split_sizes(config, data)
        bases = (
            bases_of(frame, experiment_dir, config, min_accuracy, scored_on) if len(frame) else []
        )
        points = ablation_points(bases, config.space, plan, config.resources.gpu_share > 0)
        if not points:
            say("Ablations: none (no trial on the front, or no setting to change)")
            return None
        save_plan(experiment_dir, points)
        say(f"Ablations: {describe(points)}")
        expected = len(points)

        def first() -> tune.Tuner:
            return ablation_tuner(config, data, points, experiment_dir, callbacks)

    return fit_with_recovery(first, restored, expected, automatic_resumes, say)
