"""Where runs of one search part, and how much a speed's noise sways the sampler: read off
the searches' own Optuna studies (`optuna.db` in each results folder).

Two runs of the same command and seed train the same configs to the same accuracies as long
as the sampler suggests the same ones; what it suggests depends on the trials told before
each ask (which had ended, or were stopped, by then) and on what they were told, and the
told speeds move by a few percent from run to run (docs/RESULTS.md, section 39). With two
or more folders this prints, trial by trial in the order the sampler asked, the first
trial whose config differs and whether the runs had been told the same trials, in the same
states, when they asked it (yes: the told values decided; no: which trials had ended, or
were stopped, decided), for the trials every run had told whole by then whether their other
objectives were the same and how far apart their speeds were, and the configs each pair
shares. For each folder it then asks a
fresh TPE sampler of the config's settings and seed, for each trial it sampled after its
start-up, given what the run's sampler saw at that ask (the trials told, and those still
running), once with the speeds as measured and `--repeats` times with each speed times a
log-normal factor of `--sigma` (0.02: about the spread of one config's speed between runs,
section 39): the share of asks whose suggestion moves. A fresh sampler stands in for the
run's, which had drawn for every ask before: this measures how much the told speeds sway
a sampler given what the run's knew, not what the run's would have asked. Last, for each
folder, how busy its trials kept the search's slots (`search.max_concurrent_trials`): the
trials' seconds over the slots times the span from the first trial's start to the last
one's end, and in how many processes the trials ran (Tune reuses a finished trial's process
for the next: a new one means a process was lost, and the seconds its start took; a
lagged search without held ends lost one now and then, docs/RESULTS.md sections 64-65).

    python bench/search_paths.py [--config configs/cats_dogs.yaml] [--sigma 0.02]
        [--repeats 20] [key.path=value ...] --from RUN1/ray_results/NAME [RUN2/... ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from analysis.load import trial_seconds, trial_spans
from search.config import load_config
from search.optuna_search import build_sampler, startup_trials
from search.tuner import OPTUNA_STORAGE

REPO = Path(__file__).resolve().parents[1]
TOLD = (TrialState.COMPLETE, TrialState.PRUNED)  # what a sampler learns from


def study_of(folder: Path) -> optuna.Study:
    """The one study in `folder`'s Optuna storage."""
    path = folder / OPTUNA_STORAGE
    if not path.is_file():
        raise SystemExit(f"{path}: no such file (a search's results folder, ray_results/NAME, "
                         "holds its study there)")  # fmt: skip
    storage = f"sqlite:///{path.resolve()}"
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage)


def asked_in_order(study: optuna.Study) -> list[FrozenTrial]:
    """The study's trials in the order the sampler asked them."""
    return sorted(study.get_trials(deepcopy=False), key=lambda trial: trial.number)


def config_key(trial: FrozenTrial) -> tuple:
    """A trial's sampled config, comparable between runs."""
    return tuple(sorted(trial.params.items()))


def known_before(trials: Sequence[FrozenTrial], asked: FrozenTrial) -> list[FrozenTrial]:
    """The trials told to the sampler before it asked `asked`: ended before it started."""
    start = asked.datetime_start
    return [
        trial
        for trial in trials
        if trial.state in TOLD and trial.datetime_complete and trial.datetime_complete <= start
    ]


def running_at(trials: Sequence[FrozenTrial], asked: FrozenTrial) -> list[FrozenTrial]:
    """The trials asked before `asked` and not yet told when it was asked: TPE counts them
    among its worse trials (Optuna's `constant_liar`, on by default since 5.0)."""
    start = asked.datetime_start
    return [
        trial
        for trial in trials
        if trial.number != asked.number
        and trial.datetime_start is not None
        and trial.datetime_start < start
        and (trial.datetime_complete is None or trial.datetime_complete > start)
    ]


def first_parting(runs: Sequence[Sequence[FrozenTrial]]) -> int | None:
    """The number of the first trial whose config is not the same in every run."""
    for number in range(min(map(len, runs))):
        if len({config_key(trials[number]) for trials in runs}) > 1:
            return number
    return None


def knew_the_same(runs: Sequence[Sequence[FrozenTrial]], number: int) -> bool:
    """Whether every run had been told the same trials, each as the same state (a trial
    stopped early in one run and run whole in another differs), when it asked `number`."""
    known = [
        frozenset((trial.number, trial.state) for trial in known_before(trials, trials[number]))
        for trials in runs
    ]
    return len(set(known)) == 1


def told_apart(
    runs: Sequence[Sequence[FrozenTrial]], number: int, column: int
) -> tuple[bool, float, int | None]:
    """Of the trials every run had told as COMPLETE when it asked `number`: whether their
    values other than `column` (the speed) were the same in every run, and their speeds'
    widest spread between runs (the largest over the smallest, less 1) and whose it was."""
    told = [{t.number: t for t in known_before(trials, trials[number])} for trials in runs]
    common = sorted(set.intersection(*(set(known) for known in told)))
    same, widest, whose = True, 0.0, None
    for trial in common:
        if any(known[trial].state != TrialState.COMPLETE for known in told):
            continue
        values = [known[trial].values for known in told]
        others = {tuple(v for i, v in enumerate(vals) if i != column) for vals in values}
        same = same and len(others) == 1
        speeds = [vals[column] for vals in values]
        spread = max(speeds) / min(speeds) - 1
        if spread > widest:
            widest, whose = spread, trial
    return same, widest, whose


def as_seen(trial: FrozenTrial, column: int, factor: float, running: bool = False) -> FrozenTrial:
    """`trial` as the sampler saw it, for a fresh study: still running, or told with its
    value in `column` (a speed) times `factor` and everything else as it was."""
    if running:
        return optuna.trial.create_trial(
            state=TrialState.RUNNING, params=trial.params, distributions=trial.distributions
        )
    values = None
    if trial.state == TrialState.COMPLETE:
        values = list(trial.values)
        values[column] *= factor
    return optuna.trial.create_trial(
        state=trial.state, values=values, params=trial.params,
        distributions=trial.distributions, user_attrs=trial.user_attrs,
        constraints=trial.constraints or None,
    )  # fmt: skip


def suggestion(
    seen: Sequence[FrozenTrial],
    directions: Sequence[optuna.study.StudyDirection],
    sampler: optuna.samplers.BaseSampler,
    distributions: Mapping[str, optuna.distributions.BaseDistribution],
) -> dict:
    """What `sampler` asks next of a fresh study that holds `seen`."""
    study = optuna.create_study(directions=list(directions), sampler=sampler)
    study.add_trials(seen)
    return study.ask(dict(distributions)).params


def sampled(trial: FrozenTrial) -> bool:
    """Whether the sampler chose any of the trial's params (not a grid point or a repeat
    enqueued whole)."""
    return not set(trial.params) <= set(trial.system_attrs.get("fixed_params", {}))


def speed_sway(
    trials: Sequence[FrozenTrial],
    directions: Sequence[optuna.study.StudyDirection],
    make_sampler: Callable[[], optuna.samplers.BaseSampler],
    startup: int,
    column: int,
    sigma: float,
    repeats: int,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Of the sampled asks after `startup` trials were told: (moved, asked), each ask made
    of a fresh sampler (`make_sampler`, seeded alike every time) given what the run's
    sampler saw then (the trials told, and those still running), once as measured and
    `repeats` times with every told speed (`column`) times a log-normal factor of `sigma`.
    The run's own sampler had drawn for every ask before: a fresh one measures how much
    the told speeds sway a sampler there, not what the run's would have asked."""
    moved = asked = 0
    distributions = next(t.distributions for t in trials if t.distributions)
    for trial in trials:
        known = known_before(trials, trial)
        if len(known) < startup or not sampled(trial):
            continue
        running = [as_seen(t, column, 1.0, running=True) for t in running_at(trials, trial)]
        as_measured = suggestion([*(as_seen(t, column, 1.0) for t in known), *running],
                                 directions, make_sampler(), distributions)  # fmt: skip
        for _ in range(repeats):
            factors = np.exp(rng.normal(0.0, sigma, len(known)))
            told = [as_seen(t, column, float(f)) for t, f in zip(known, factors, strict=True)]
            moved += (suggestion([*told, *running], directions, make_sampler(), distributions)
                      != as_measured)  # fmt: skip
            asked += 1
    return moved, asked


def slot_use(folder: Path) -> tuple[float, float, int]:
    """(the trials' seconds, the span from the first trial's start to the last one's end,
    the processes they ran in) of a results folder's trials: `analysis.load`'s seconds and
    spans, and the processes their reports name (`pid`: a restarted trial's new one too)."""
    spans = trial_spans(folder).values()
    span = max(end for _, end in spans) - min(start for start, _ in spans) if spans else math.nan
    processes = {json.loads(line)["pid"]
                 for results in folder.glob("trial_*/result.json")
                 for line in results.read_text().splitlines() if line.strip()}  # fmt: skip
    return sum(trial_seconds(folder).values()), span, len(processes)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--from", dest="folders", type=Path, nargs="+", required=True,
                        help="runs' results folders (ray_results/NAME)")  # fmt: skip
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"))
    parser.add_argument("--sigma", type=float, default=0.02,
                        help="log-normal spread of a told speed between runs")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=20, help="jittered asks per ask")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value")
    args = parser.parse_args()
    search = load_config(args.config, args.overrides).search
    names = list(search.objectives)
    wanted = [optuna.study.StudyDirection.MAXIMIZE if direction == "max"
              else optuna.study.StudyDirection.MINIMIZE
              for direction in search.objectives.values()]  # fmt: skip
    studies = [study_of(folder) for folder in args.folders]
    for folder, study in zip(args.folders, studies, strict=True):
        if list(study.directions) != wanted:
            raise SystemExit(f"{folder}: its study's directions are not those of "
                             f"{args.config}'s objectives ({search.objectives}): pass the "
                             "config it ran with as --config")  # fmt: skip
    runs = [asked_in_order(study) for study in studies]

    if len(runs) > 1:
        parting = first_parting(runs)
        if parting is None:
            print(f"{len(args.folders)} runs: the same config at every trial")
        else:
            why = "the same trials known: the told values decided"
            if not knew_the_same(runs, parting):
                why = "other trials known: which had ended, or were stopped, decided"
            print(f"{len(args.folders)} runs: the same configs up to trial {parting - 1}, "
                  f"parted at trial {parting} ({why})")  # fmt: skip
            if "throughput" in names:
                same, widest, whose = told_apart(runs, parting, names.index("throughput"))
                others = "the same" if same else "not the same"
                print(f"  the trials told whole by then: their other objectives {others} "
                      f"in every run, their speeds up to {widest:.1%} apart "
                      f"(trial {whose})")  # fmt: skip
        for (a, first), (b, second) in itertools.combinations(enumerate(runs, 1), 2):
            common = {config_key(t) for t in first} & {config_key(t) for t in second}
            print(f"runs {a} and {b}: {len(common)} configs in common "
                  f"(of {len(first)} and {len(second)})")  # fmt: skip

    slots = search.max_concurrent_trials
    for index, folder in enumerate(args.folders, 1):
        seconds, span, processes = slot_use(folder)
        busy = f"{seconds / (slots * span):.2f} of" if slots else "(uncapped slots)"
        print(f"run {index}: its trials busy {busy} {slots or ''} slots' span ({seconds:.1f} "
              f"trial-seconds over {span:.1f} s), in {processes} processes")  # fmt: skip

    if "throughput" not in names or search.sampler != "tpe":
        print("the speeds' sway is measured for TPE with throughput among its objectives: "
              f"here {search.sampler}, {', '.join(names)}")  # fmt: skip
        return
    column = names.index("throughput")
    startup = startup_trials(search.sampler, search.num_samples)
    rng = np.random.default_rng(0)
    for index, (folder, trials) in enumerate(zip(args.folders, runs, strict=True), 1):
        moved, asked = speed_sway(
            trials, wanted,
            lambda: build_sampler(search.sampler, search.num_samples, search.seed),
            startup, column, args.sigma, args.repeats, rng,
        )  # fmt: skip
        share = moved / asked if asked else math.nan
        print(f"run {index} ({folder}): told speeds jittered by {args.sigma:.1%}, a fresh "
              f"sampler's suggestion moved in {moved} of {asked} asks ({share:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
