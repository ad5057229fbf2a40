"""What early-stopping settings save and lose, read off the same searches: a paired replay.

Two searches of the same config differ by more than their stopping: `throughput` is
measured, its noise changes what the sampler suggests next, and the hypervolumes of three
runs of one config ranged from 0.204 to 0.265 (docs/RESULTS.md, section 4). So each rule is judged
here on the trials of finished searches: the early-stopping scheduler watches their
results again, in the order they were reported (`search.early_stopping.replay`, the
scheduler's own decisions), and the trials it would have stopped are taken off the front
at the epoch they would have stopped.

The searches run with early stopping off and every epoch's gaps scored
(`train.gap_epochs`), so that any rung can be replayed. Scoring every epoch lengthens the
epochs that only the trials going on reach, so the seconds kept read a little lower, the
saving a little larger, than in a search that scores only its rungs. What the replay
cannot show: the sampler's answer to the trials stopped (Optuna is told PRUNED and
suggests from the rest). Columns, per rule and the mean over the searches: trials
stopped, and at which epochs (epoch: trials), trial seconds kept (of the whole search's
trial seconds), hypervolume kept, trials of the whole front stopped, and of its three most
accurate trials (issue 37's aim: none). `--detail` adds a line for each front trial a rule
stops: its accuracy when stopped, where it ended (best_val_acc, gen_gap) and the share of
the search's hypervolume it holds alone. Each search's line says where its trials run
whole that were still at chance at their second rung or later ended (what
`search.early_stopping.at_chance_after` stops). `--judge-warmup` replays as the replay did before
2026-11-27 (`597cdd1`): every trial judged at every rung, inside its lr warmup too. A
rule is ahead on accuracy as the search's default is (`search.early_stopping.ahead_on`);
`:::any` after its min peers lets any objective decide, as before `e055fab`.

Whether a rule decides alike from run to run (issue 37: the same command and seed should
give the same search where timing does not decide): `--agreement`, given several searches
of one config and seed, counts the configs two or more of them ran alike (the same sampled
settings) and how many the rule stopped at the same epoch, or not at all, in every one, and
lists the others with each search's decision; then, by epoch, how far a config's speed moved
from search to search (each search's scale taken out) against what its trials' own
intervals said. What differs between such runs is the speeds
(training on the CPU with one seed repeats its accuracies exactly) and the order results
arrive in. `--speed-noise 0.03 0.10` replays each rule again with every speed known to that
relative standard error instead of its own interval (a trial's first epochs give a few
segments, whose interval is wide and moves from run to run): what the intervals' widths
decide.

    python bench/early_stopping_replay.py [--config configs/cats_dogs.yaml]
        [--num-samples 48] [--seeds 0 1]
        [--rules 2,4:0.5 1,2,4:0.5:3:::any 1,2,4:0.5:3::throughput,best_val_acc ...]
        [--from RESULTS_DIR ...] [--workdir DIR] [--classes 2] [--detail]
        [--agreement] [--speed-noise SHARE ...] [--judge-warmup] [key.path=value ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.load import (
    CONFIG_PREFIX,
    frame_from_tune,
    histories_from_tune,
    settings_text,
    trial_seconds,
)
from analysis.pareto import declared_bounds, hypervolume, mark_front
from analysis.report import split_sizes_from_parent
from analysis.same_work import pool_same_work
from search.config import EarlyStoppingSection, SearchConfig, load_config
from search.early_stopping import ParetoEarlyStopping, replay, rung_epoch
from search.experiment import SearchState
from trainables.metrics import ASKED, METRICS, STATUS_STOPPED_EARLY, Z_95, min_accuracy_for
from trainables.settings import DEFAULT_EPOCHS, TrainSettings

REPO = Path(__file__).resolve().parents[1]
MOST_ACCURATE = 3  # a rule should stop none of a search's this many most accurate trials
NOT_RUN = "-"  # a config's decision in a search that did not run it (`decision_agreement`)
DEFAULT_RULES = [
    "1,2,4:0.5:3:blind", "1,2,4:0.5:3:::any", "1,2,4:0.5", "2,4:0.5", "1,2,4:0.4",
    "1,2,4:0.3", "1,2,4,6:0.5",
]  # fmt: skip


@dataclass(frozen=True)
class Rule:
    rungs: tuple[int, ...]
    keep: float
    min_peers: int
    sees_min_accuracy: bool = True  # False: the rule before 2026-11-25 (objectives alone)
    compared_on: tuple[str, ...] = ()  # the objectives compared at a rung; (): all
    on_evidence: bool = True  # False: on the values alone, the rule before 2026-11-26's evening
    # the objectives a peer must be ahead on to stop a trial, or "auto" (the search's
    # default: best_val_acc where compared); None: any (the rule before `e055fab`)
    ahead_on: tuple[str, ...] | str | None = EarlyStoppingSection().ahead_on
    # the first rungs at which a trial still at chance goes on (the search's default: 0)
    slow_start_rungs: int = EarlyStoppingSection().slow_start_rungs
    # rungs after which a trial still at chance is stopped by one peer above it (the
    # search's default: 1); None: judged as any trial (the rule before 2026-11-28)
    at_chance_after: int | None = EarlyStoppingSection().at_chance_after

    @classmethod
    def parse(cls, text: str) -> Rule:
        """`rungs:keep[:min_peers[:how[:objectives[:ahead_on[:slow_start_rungs
        [:at_chance_after]]]]]]]`, e.g.
        `1,2,4:0.5` (on evidence, ahead on accuracy, as the scheduler is now), `2,4:0.3:4`,
        `1,2,4:0.5:3:::any` (ahead on any objective, as before 2026-11-27),
        `1,2,4:0.5:3:values` (on the values alone, ahead on any, as before 2026-11-26's
        evening), `1,2,4:0.5:3:blind` (on the values, trials below the min accuracy
        compared on the objectives alone, as before 2026-11-25) or
        `1,2,4:0.5:3::throughput,best_val_acc` (compared on those objectives only) or
        `1,2,4:0.5:3::::1` (a trial still at chance goes on at the first rung) or
        `1,2,4:0.5:3:::::none` (a trial still at chance after the first rung judged as any,
        as before 2026-11-28)."""
        fields = [*text.split(":"), *[""] * 7]
        rungs, keep, min_peers, blind, compared_on, ahead, slow, chance, *_ = fields
        if blind not in ("", "blind", "values"):
            raise ValueError(
                f"the fourth field of a rule is 'values', 'blind' or nothing, got {blind!r}"
            )
        if chance not in ("", "none") and not (chance.isdigit() and int(chance) >= 1):
            raise ValueError(
                f"the eighth field of a rule is a number of rungs (1 or more), 'none' or "
                f"nothing, got {chance!r}"
            )
        default = EarlyStoppingSection()
        ahead_on = default.ahead_on if not blind else None  # the older rules': any
        if ahead:
            names = tuple(name.strip() for name in ahead.split(",") if name.strip())
            ahead_on = {"any": None, "auto": "auto"}.get(ahead, names)
        return cls(
            tuple(int(rung) for rung in rungs.split(",")),
            float(keep or default.keep),
            int(min_peers or default.min_peers),
            sees_min_accuracy=blind != "blind",
            compared_on=tuple(name.strip() for name in compared_on.split(",") if name.strip()),
            on_evidence=not blind,
            ahead_on=ahead_on,
            slow_start_rungs=int(slow or default.slow_start_rungs),
            at_chance_after=(None if chance == "none"
                             else int(chance) if chance else default.at_chance_after),
        )  # fmt: skip

    def objectives(self, searched: Mapping[str, str]) -> dict[str, str]:
        """The search's objectives this rule compares trials on at a rung."""
        unknown = [name for name in self.compared_on if name not in searched]
        if unknown:
            raise ValueError(
                f"rule {self}: {', '.join(unknown)} not among the search's objectives "
                f"({', '.join(searched)})"
            )
        return {name: searched[name] for name in self.compared_on or searched}

    def ahead_on_within(self, compared: Mapping[str, str]) -> tuple[str, ...] | None:
        """The objectives the rule stops trials on being behind on, among those it
        compares (`auto` resolved as the search resolves it); None: any."""
        section = EarlyStoppingSection(ahead_on=self.ahead_on)
        ahead_on = section.effective_ahead_on(compared)
        unknown = [name for name in ahead_on or () if name not in compared]
        if unknown:
            raise ValueError(
                f"rule {self}: ahead on {', '.join(unknown)}, which it does not compare "
                f"({', '.join(compared)})"
            )
        return ahead_on

    def __str__(self) -> str:
        default = EarlyStoppingSection().min_peers
        peers = "" if self.min_peers == default else f", min {self.min_peers} peers"
        blind = "" if self.sees_min_accuracy else ", blind to the min accuracy"
        blind += "" if self.on_evidence or not self.sees_min_accuracy else ", on the values"
        compared = f", on {' and '.join(self.compared_on)} only" if self.compared_on else ""
        if self.ahead_on is None and self.on_evidence:
            compared += ", ahead on any"
        elif isinstance(self.ahead_on, tuple):
            compared += f", ahead on {' or '.join(self.ahead_on)}"
        if self.slow_start_rungs != EarlyStoppingSection().slow_start_rungs:
            compared += f", slow starts spared at {self.slow_start_rungs} rungs"
        if self.at_chance_after != EarlyStoppingSection().at_chance_after:
            after = self.at_chance_after
            compared += (", at chance judged as any" if after is None
                         else f", at chance stopped after {after} rungs")  # fmt: skip
        return f"rungs {list(self.rungs)}, keep {self.keep:g}{peers}{blind}{compared}"


@dataclass(frozen=True)
class Search:
    """One finished search, as the replay reads it."""

    name: str
    frame: pd.DataFrame  # a row per trial, its last result
    histories: pd.DataFrame  # a row per trial and epoch
    seconds: dict[str, float]  # each trial's wall seconds
    front: set[str]  # the trials of its front, no trial stopped
    most_accurate: set[str]  # its MOST_ACCURATE trials of the highest best_val_acc
    min_accuracy: float  # below it a trial is off the front (chance + 0.05)
    split_sizes: dict[str, int]  # images of val, train_eval and test: the objectives' noise

    @classmethod
    def read(cls, experiment: Path, config: SearchConfig, min_accuracy: float) -> Search:
        objectives = dict(config.objectives)
        # the trials of one work share one speed, as on the search's own front
        frame = pool_same_work(frame_from_tune(experiment, tuple(METRICS)))
        frame["trial_id"] = frame["trial_id"].astype(str)
        # best_val_acc: the min accuracy is judged on it, whatever the objectives
        names = tuple(dict.fromkeys((*objectives, "best_val_acc", "timestamp", "time_total_s",
                                     "throughput_low", "throughput_high")))  # fmt: skip
        # a trial restored from its checkpoint reports its epochs since then again
        histories = histories_from_tune(experiment, names).drop_duplicates(
            ["trial_id", "epoch"], keep="last"
        )
        marked = mark_front(frame, objectives, min_accuracy)
        return cls(
            name=experiment.name,
            frame=frame,
            histories=histories,
            seconds=trial_seconds(experiment),
            front=set(marked.loc[marked["is_pareto"], "trial_id"]),
            most_accurate=set(frame.nlargest(MOST_ACCURATE, "best_val_acc")["trial_id"]),
            min_accuracy=min_accuracy,
            split_sizes=split_sizes_of(experiment),
        )

    def sampled_settings(self, space: Sequence[str]) -> dict[str, str]:
        """Each trial's sampled settings (the keys of the config's `space`), as text: the
        trials of two searches of one config and seed that ran the same config share it."""
        columns = [f"{CONFIG_PREFIX}{key}" for key in space]
        columns = [column for column in columns if column in self.frame]
        return {str(row["trial_id"]): settings_text(row, columns) or str(row["trial_id"])
                for row in self.frame.to_dict("records")}  # fmt: skip

    def with_speeds_known_to(self, relative_error: float) -> Search:
        """This search with every result's throughput interval replaced by one of
        `relative_error` standard errors of its speed: what a rule decides where each
        speed is known as well as any other (`--speed-noise`)."""
        half = Z_95 * relative_error * self.histories["throughput"]
        histories = self.histories.assign(
            throughput_low=self.histories["throughput"] - half,
            throughput_high=self.histories["throughput"] + half,
        )
        return replace(self, histories=histories)

    def setting_of_each_trial(self, key: str) -> dict[str, int]:
        """Each trial's whole-number setting `key`, the trainable's default where its config
        leaves it out."""
        default = TrainSettings.model_fields[key].default
        values = self.frame.get(f"config.{key}", pd.Series(default, index=self.frame.index))
        return {trial: int(value) if pd.notna(value) else default
                for trial, value in zip(self.frame["trial_id"], values, strict=True)}  # fmt: skip

    def warmup_epochs(self) -> dict[str, int]:
        """Each trial's `warmup_epochs`, which the live scheduler reads from its config."""
        return self.setting_of_each_trial("warmup_epochs")

    def last_epochs(self) -> dict[str, int]:
        return self.setting_of_each_trial("epochs")

    def places(self) -> dict[str, int]:
        """Each trial's place among the search's suggestions (`asked`), where the search
        noted it: a rule with a lag judges a trial against the trials that many before."""
        column = f"{CONFIG_PREFIX}{ASKED}"
        if column not in self.frame:
            return {}
        return {trial: int(place) for trial, place in zip(self.frame["trial_id"],
                self.frame[column], strict=True) if pd.notna(place)}  # fmt: skip

    def still_at_chance_finals(self, rungs: tuple[int, ...]) -> list[float]:
        """Where the trials run whole that were still below the min accuracy at one of
        `rungs` after the first (counted at full rate, `rung_epoch`) ended: what
        `at_chance_after` stops (docs/RESULTS.md, section 37)."""
        warmups, last = self.warmup_epochs(), self.last_epochs()
        # a trial resumed from a checkpoint reports its epochs after it again: the last counts
        reported = self.histories.drop_duplicates(["trial_id", "epoch"], keep="last")
        accuracy = reported.set_index(["trial_id", "epoch"])["best_val_acc"]
        finals = []
        for trial, ended in zip(self.frame["trial_id"], self.frame["best_val_acc"], strict=True):
            epochs = [rung_epoch(rung, warmups[trial]) for rung in rungs[1:]]
            whole = (trial, last[trial]) in accuracy.index
            if whole and any(accuracy.get((trial, epoch), 1.0) < self.min_accuracy
                             for epoch in epochs):  # fmt: skip
                finals.append(float(ended))
        return sorted(finals)


def rungs_of(config: SearchConfig) -> tuple[int, ...]:
    """The rungs of the config's early stopping (the search's default where it has none)."""
    return (config.search.early_stopping or EarlyStoppingSection()).rungs


def split_sizes_of(experiment: Path) -> dict[str, int]:
    """The images each accuracy of the search was scored on, as its MLflow run says."""
    state = SearchState.load(experiment)
    sizes = split_sizes_from_parent(state.parent_run().data.tags) if state else None
    if sizes is None:
        sys.exit(f"{experiment}: its MLflow parent run does not say the splits' sizes (a "
                 "search from before 2026-12-06): run it again")  # fmt: skip
    return sizes


@dataclass(frozen=True)
class FrontTrialStopped:
    """A trial of the whole search's front that a rule stops."""

    trial_id: str
    epoch: int  # the epoch it is stopped at
    accuracy_then: float  # its best_val_acc at that epoch
    best_val_acc: float  # where it ended, run whole
    gen_gap: float
    hypervolume_alone: float  # the share of the search's hypervolume only it holds


@dataclass(frozen=True)
class Replayed:
    stops: dict[str, int]  # trial -> the epoch it is stopped at
    seconds_kept: float  # share of the search's trial seconds
    hypervolume_kept: float  # share of the search's hypervolume
    front_stopped: int
    most_accurate_stopped: int
    front_trials_stopped: list[FrontTrialStopped]

    @property
    def stopped(self) -> int:
        return len(self.stops)

    @property
    def stopped_at(self) -> dict[int, int]:
        """Epoch -> trials stopped there."""
        return dict(sorted(Counter(self.stops.values()).items()))


@dataclass(frozen=True)
class Agreement:
    """How alike one rule decided on the trials that several searches of one config and
    seed ran alike (the same sampled settings)."""

    shared: int  # configs run in two searches or more
    alike_in_all: int  # of those, decided alike (stopped at the same epoch, or not) in all
    pairs: int  # pairs of searches that ran a config, over the shared configs
    pairs_alike: int
    differing: list[tuple[str, list[int | str | None]]]  # config, its decision in each


def decision_agreement(
    settings: Sequence[Mapping[str, str]], stops: Sequence[Mapping[str, int]]
) -> Agreement:
    """Per search, each trial's sampled settings (`Search.sampled_settings`) and the epochs
    a rule stopped trials at: whether the searches' trials of one config were decided
    alike. A config's decision is its stop epoch, or None where it is not stopped; a
    config run twice in one search counts once, by its first trial."""
    decided: list[dict[str, int | None]] = []
    for by_trial, stopped in zip(settings, stops, strict=True):
        decisions: dict[str, int | None] = {}
        for trial, config in by_trial.items():
            decisions.setdefault(config, stopped.get(trial))
        decided.append(decisions)
    runs = Counter(config for decisions in decided for config in decisions)
    shared = [config for config, count in runs.items() if count > 1]
    pairs = pairs_alike = alike_in_all = 0
    differing = []
    for config in shared:
        each = [decisions[config] for decisions in decided if config in decisions]
        alike_in_all += len(set(each)) == 1
        pairs += len(each) * (len(each) - 1) // 2
        pairs_alike += sum(count * (count - 1) // 2 for count in Counter(each).values())
        if len(set(each)) > 1:
            differing.append((config, [decisions.get(config, NOT_RUN) for decisions in decided]))
    return Agreement(len(shared), alike_in_all, pairs, pairs_alike, differing)


def speed_spread_by_epoch(
    histories: Sequence[pd.DataFrame], settings: Sequence[Mapping[str, str]], least: int = 3
) -> pd.DataFrame:
    """Per epoch, how far one config's speed moves from search to search, against what its
    trials' own intervals say: over the configs `least` searches or more ran alike (each
    search's trials' histories and sampled settings), the standard deviation of the
    logarithm of each config's `throughput` across the searches, each search's scale taken
    out (the median over its configs of how far above their mean across the searches it
    read them: a search times its scale once, as it starts, and every trial of it shares
    that), and the median of the trials' own standard errors (their 95% intervals over
    3.92, relative to the speed). Columns: configs, between_searches, own_intervals."""
    rows = []
    for run, (frame, by_trial) in enumerate(zip(histories, settings, strict=True)):
        speeds = pd.to_numeric(frame["throughput"], errors="coerce")
        own = (frame["throughput_high"] - frame["throughput_low"]) / (2 * Z_95 * speeds)
        rows.append(pd.DataFrame({"run": run, "config": frame["trial_id"].map(by_trial),
                                  "epoch": frame["epoch"], "log": np.log(speeds),
                                  "own": own}))  # fmt: skip
    table = pd.concat(rows, ignore_index=True).dropna(subset=["log"])
    table = table.drop_duplicates(["run", "config", "epoch"])  # a config run twice: its first
    cell = table.groupby(["config", "epoch"])["log"]
    shared = cell.transform("size") >= least
    table = table[shared]
    centred = table["log"] - table.groupby(["config", "epoch"])["log"].transform("mean")
    table = table.assign(
        log=table["log"] - table["run"].map(centred.groupby(table["run"]).median())
    )
    by_cell = table.groupby(["config", "epoch"]).agg(
        between=("log", lambda logs: logs.std(ddof=1)), own=("own", "median")
    )
    return by_cell.groupby(level="epoch").agg(
        configs=("between", "size"), between_searches=("between", "median"),
        own_intervals=("own", "median"),
    )  # fmt: skip


def unscored_rungs(search: Search, rules: list[Rule], objectives: list[str]) -> list[int]:
    """The rungs that trials of `search` reached without reporting every objective there:
    nothing to replay (a search run without early stopping scores `gen_gap` only at its
    gap epochs). A rung no trial reached stops nothing and is no problem."""
    epochs = search.histories["epoch"]
    values = search.histories[objectives]
    rungs = sorted({rung for rule in rules for rung in rule.rungs})
    return [
        rung
        for rung in rungs
        if (epochs == rung).any() and values[epochs == rung].isna().any(axis=1).all()
    ]


def replay_rule(
    search: Search, rule: Rule, config: SearchConfig, judge_warmup: bool = False
) -> Replayed:
    objectives = dict(config.objectives)
    min_accuracy = search.min_accuracy if rule.sees_min_accuracy else None
    compared = rule.objectives(objectives)
    scheduler = ParetoEarlyStopping(
        compared, rule.rungs, rule.keep, rule.min_peers, min_accuracy,
        split_sizes=search.split_sizes if rule.on_evidence else None,
        ahead_on=rule.ahead_on_within(compared), slow_start_rungs=rule.slow_start_rungs,
        at_chance_after=rule.at_chance_after, lag=config.search.effective_lag,
    )  # fmt: skip
    warmups = None if judge_warmup else search.warmup_epochs()
    stops = replay(scheduler, search.histories, search.last_epochs(), warmups, search.places())
    at_stop = search.histories.set_index(["trial_id", "epoch"])["time_total_s"]
    kept = {
        trial: float(at_stop[(trial, stops[trial])]) if trial in stops else seconds
        for trial, seconds in search.seconds.items()
    }
    after = search.frame.copy()
    after.loc[after["trial_id"].isin(stops), "status"] = STATUS_STOPPED_EARLY
    bounds = declared_bounds(search.frame, objectives, dict(config.search.hypervolume_bounds))
    whole = hypervolume(search.frame, objectives, bounds, search.min_accuracy)
    left = hypervolume(after, objectives, bounds, search.min_accuracy)
    accuracy = search.histories.set_index(["trial_id", "epoch"])["best_val_acc"]
    front_trials = []
    for trial in sorted(search.front & set(stops), key=stops.__getitem__):
        without = search.frame[search.frame["trial_id"] != trial]
        alone = whole - hypervolume(without, objectives, bounds, search.min_accuracy)
        row = search.frame[search.frame["trial_id"] == trial].iloc[0]
        front_trials.append(FrontTrialStopped(
            trial, stops[trial], float(accuracy[(trial, stops[trial])]),
            float(row["best_val_acc"]), float(row.get("gen_gap", float("nan"))),
            alone / whole if whole else 0.0,
        ))  # fmt: skip
    return Replayed(
        stops=stops,
        seconds_kept=sum(kept.values()) / sum(search.seconds.values()),
        hypervolume_kept=left / whole if whole else 1.0,
        front_stopped=len(search.front & set(stops)),
        most_accurate_stopped=len(search.most_accurate & set(stops)),
        front_trials_stopped=front_trials,
    )


def run_search(config_path: str, overrides: list[str], name: str, workdir: Path) -> Path:
    """A search with early stopping off and the gaps scored at every epoch but the last."""
    config = load_config(config_path, overrides)
    epochs = config.train.get("epochs", DEFAULT_EPOCHS)
    every_epoch = f"train.gap_epochs=[{', '.join(str(e) for e in range(1, epochs))}]"
    command = [
        sys.executable, "-m", "search.run", "--config", str(Path(config_path).resolve()),
        "--name", name, *overrides, "search.early_stopping=null", "search.predict_oom=false",
        every_epoch,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    print(f"running {name} ...", flush=True)
    subprocess.run(command, cwd=workdir, env=env, check=True, capture_output=True, text=True)
    return workdir / "ray_results" / name


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"))
    parser.add_argument("--num-samples", type=int, default=48, help="trials per search")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1],
                        help="search.seed of each search run")  # fmt: skip
    parser.add_argument("--rules", nargs="+", default=DEFAULT_RULES,
                        help="rungs:keep[:min_peers[:blind[:objectives]]], e.g. 1,2,4:0.5, "
                        "1,2,4:0.5:3:blind (the rule before 2026-11-25) or "
                        "1,2,4:0.5:3::throughput,best_val_acc (compared on those at the "
                        "rungs)")  # fmt: skip
    parser.add_argument("--workdir", type=Path,
                        help="run the searches here and keep them (ray_results/seed<N>), "
                        "to replay again with --from; default: a temporary folder")  # fmt: skip
    parser.add_argument("--classes", type=int, default=2,
                        help="classes of the searched data: the front keeps trials above "
                        "chance + 0.05, as the search's report does")  # fmt: skip
    parser.add_argument("--from", dest="replayed", type=Path, nargs="+", default=[],
                        help="replay these finished searches' Tune folders instead of "
                        "running new ones (run with gen_gap scored at the rungs)")  # fmt: skip
    parser.add_argument("--detail", action="store_true",
                        help="a line for each front trial a rule stops")  # fmt: skip
    parser.add_argument("--agreement", action="store_true",
                        help="for searches of one config and seed: how alike each rule "
                        "decided on the configs they ran alike, and which it did not")  # fmt: skip
    parser.add_argument("--speed-noise", type=float, nargs="+", default=[], metavar="SHARE",
                        help="replay each rule again with every speed known to SHARE (a "
                        "relative standard error, e.g. 0.05), not its own interval")  # fmt: skip
    parser.add_argument("--judge-warmup", action="store_true",
                        help="judge trials inside their lr warmup too (the replay before "
                        "2026-11-27; the live rule does not)")  # fmt: skip
    parser.add_argument("overrides", nargs="*", metavar="key.path=value",
                        help="config overrides for the searches run")  # fmt: skip
    args = parser.parse_args()
    overrides = [f"search.num_samples={args.num_samples}", *args.overrides]
    config = load_config(args.config, overrides)
    try:
        rules = [Rule.parse(text) for text in args.rules]
        for rule in rules:
            rule.objectives(dict(config.objectives))
    except ValueError as error:  # exit 2 with the usage line, not a traceback
        parser.error(f"--rules: {error}")
    with tempfile.TemporaryDirectory(prefix="early-stopping-replay-") as directory:
        workdir = args.workdir or Path(directory)
        workdir.mkdir(parents=True, exist_ok=True)
        experiments = args.replayed or [
            run_search(args.config, [*overrides, f"search.seed={seed}"], f"seed{seed}", workdir)
            for seed in args.seeds
        ]
        min_accuracy = min_accuracy_for(args.classes)
        searches = [Search.read(path, config, min_accuracy) for path in experiments]
    for search in searches:
        missing = unscored_rungs(search, rules, list(config.objectives))
        if missing:
            epochs = ", ".join(str(rung) for rung in missing)
            print(f"{search.name}: no trial reported {', '.join(config.objectives)} at "
                  f"epoch {epochs}, so those rungs cannot be replayed: run the search with "
                  f'"train.gap_epochs=[{epochs}]", or replay other rungs',
                  file=sys.stderr)  # fmt: skip
            sys.exit(2)
    print()
    for search in searches:
        print(f"{search.name}: {len(search.frame)} trials, {len(search.front)} on the front, "
              f"{sum(search.seconds.values()):.0f} trial seconds")  # fmt: skip
        if (search.frame.get("status") == STATUS_STOPPED_EARLY).any():
            print(f"  {search.name} ran with early stopping: its stopped trials cannot go "
                  "further here, so a rule that stops fewer looks like its own")  # fmt: skip
        finals = search.still_at_chance_finals(rungs_of(config))
        if finals:
            print(f"  {len(finals)} run whole were still at chance at their second rung or "
                  f"later, and ended at {finals[0]:.4g}-{finals[-1]:.4g} (median "
                  f"{statistics.median(finals):.4g})")  # fmt: skip
    header = ["rule", "search", "stopped", "at epoch (epoch: trials)", "seconds kept",
              "hypervolume kept", "front stopped",
              f"{MOST_ACCURATE} most accurate stopped"]  # fmt: skip
    rows: list[list[str]] = []
    details: list[str] = []
    agreements: list[tuple[str, Agreement]] = []
    variants = [(str(rule), rule, searches) for rule in rules] + [
        (f"{rule}, speeds known to {share:.0%}", rule,
         [search.with_speeds_known_to(share) for search in searches])
        for rule in rules for share in args.speed_noise
    ]  # fmt: skip
    for label, rule, replayed in variants:
        outcomes = [replay_rule(search, rule, config, args.judge_warmup) for search in replayed]
        settings = [search.sampled_settings(list(config.space)) for search in replayed]
        agreements.append((label, decision_agreement(settings, [o.stops for o in outcomes])))
        for search, outcome in zip(replayed, outcomes, strict=True):
            rows.append([label, search.name, f"{outcome.stopped}",
                         str(outcome.stopped_at or "-"),
                         f"{outcome.seconds_kept:.2f}", f"{outcome.hypervolume_kept:.3f}",
                         f"{outcome.front_stopped} of {len(search.front)}",
                         f"{outcome.most_accurate_stopped}"])  # fmt: skip
            details += [f"{label}, {search.name}: {stopped.trial_id} stopped at epoch "
                        f"{stopped.epoch} at best_val_acc {stopped.accuracy_then:.4g}; run "
                        f"whole it ended at {stopped.best_val_acc:.4g}, gen_gap "
                        f"{stopped.gen_gap:.3g}, and held {stopped.hypervolume_alone:.1%} of "
                        "the hypervolume alone"
                        for stopped in outcome.front_trials_stopped]  # fmt: skip
        if len(outcomes) > 1:
            rows.append([label, "mean", "", "",
                         f"{statistics.mean(o.seconds_kept for o in outcomes):.2f}",
                         f"{statistics.mean(o.hypervolume_kept for o in outcomes):.3f}",
                         "", f"{sum(o.most_accurate_stopped for o in outcomes)}"])  # fmt: skip
    print()
    print(pd.DataFrame(rows, columns=header).to_string(index=False))
    if args.detail:
        print("\nFront trials stopped:" if details else "\nNo front trial stopped.")
        for line in details:
            print(f"  {line}")
    if args.agreement:
        order = ", ".join(str(path) for path in experiments)
        print("\nDecided alike, on the configs two searches or more ran alike (each config's "
              f"stop epoch, or None; {NOT_RUN}: not run), in the order {order}:")  # fmt: skip
        for label, agreement in agreements:
            print(f"  {label}: {agreement.alike_in_all} of {agreement.shared} configs alike in "
                  f"every search, {agreement.pairs_alike} of {agreement.pairs} pairs")  # fmt: skip
            for settings, decisions in agreement.differing:
                print(f"    {decisions}: {settings}")
        spread = speed_spread_by_epoch(
            [search.histories for search in searches],
            [search.sampled_settings(list(config.space)) for search in searches],
        )
        if len(spread):
            print("\nA config's speed from search to search (relative standard deviation, "
                  "each search's scale taken out), against its trials' own intervals "
                  "(median standard error), by epoch, over the configs three searches or "
                  "more ran:")  # fmt: skip
            print(spread.round(4).to_string())


if __name__ == "__main__":
    main()
