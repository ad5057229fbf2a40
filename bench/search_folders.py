"""Figures read off finished searches' Tune folders, to compare searches run apart (at other
commits, with other rules): what docs/RESULTS.md section 4 read off its runs.

For each search folder (`ray_results/<name>`: the search's trials, not its ablations):
its trials, the span from its first trial's start to its last trial's end, the trial
seconds in all, the trials stopped early at each epoch, and its front's hypervolume (the
config's objectives, its declared bounds or else bounds common to all the folders given,
trials below the config's min accuracy off the front, as the report does). With
`--against OTHER` (a search of the same config without early stopping, say), each
search's hypervolume against OTHER's at equal trial time: the hypervolume of the trials
OTHER had finished when as many seconds had passed since its first trial started as the
search's span. Each search's "at chance" column counts its trials that ran all their
epochs and ended below the min accuracy. With `--by SETTING` (a sampled setting, e.g.
`augment`), the trials of all the searches that ran all their epochs, grouped by that
setting's value: how many, their median best_val_acc and gen_gap, how many ended at chance
and how many are on their search's front.

    python bench/search_folders.py ray_results/on-s0 [ray_results/on-s1 ...]
        [--against ray_results/off-s0] [--by augment] [--config configs/cats_dogs.yaml]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.load import frame_from_tune, trial_spans
from analysis.pareto import Bounds, declared_bounds, hypervolume, mark_front
from analysis.same_work import pool_same_work
from search.config import load_config
from trainables.metrics import METRICS, min_accuracy_for

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Search:
    """One search folder: its trials (a row each) and when each ran."""

    folder: Path
    trials: pd.DataFrame
    spans: dict[str, tuple[float, float]]  # trial id -> (start, end), seconds since the epoch

    @classmethod
    def read(cls, folder: Path) -> Search:
        trials = frame_from_tune(folder, tuple(METRICS))
        if trials.empty:
            raise SystemExit(f"{folder}: no trial folders (a search's ray_results/<name>?)")
        # the trials of one work share one speed, as on the search's own front
        return cls(folder, pool_same_work(trials), trial_spans(folder))

    @property
    def first_start(self) -> float:
        return min(start for start, _ in self.spans.values())

    @property
    def span_s(self) -> float:
        """From the first trial's start to the last trial's end."""
        return max(end for _, end in self.spans.values()) - self.first_start

    @property
    def trial_seconds(self) -> float:
        return sum(end - start for start, end in self.spans.values())

    def stopped_by_epoch(self) -> dict[int, int]:
        stopped = self.trials[self.trials["status"] == "stopped_early"]
        return {int(e): int(n) for e, n in stopped["epoch"].value_counts().sort_index().items()}

    def ran_whole(self) -> pd.DataFrame:
        """The trials that ran all their epochs (none stopped, none pruned)."""
        epochs = self.trials.get("config.epochs", self.trials["epoch"].max())
        return self.trials[(self.trials["status"] == "ok") & (self.trials["epoch"] >= epochs)]

    def ended_within(self, seconds: float) -> pd.DataFrame:
        """The trials that had ended `seconds` after the first trial started."""
        ended = (
            self.trials["trial_id"]
            .astype(str)
            .map({trial: end for trial, (_, end) in self.spans.items()})
        )
        return self.trials[ended <= self.first_start + seconds]


def common_bounds(frames: list[pd.DataFrame], objectives: dict[str, str], given: Bounds) -> Bounds:
    """The declared bounds, else natural ones, else the largest over all the folders, so
    that their hypervolumes share one box."""
    return declared_bounds(pd.concat(frames, ignore_index=True), objectives, given or None)


def by_setting(
    searches: list[Search], setting: str, objectives: dict[str, str], min_accuracy: float
) -> pd.DataFrame:
    """The trials of `searches` that ran whole, grouped by `config.<setting>`."""
    column = f"config.{setting}"
    whole = []
    for search in searches:
        if column not in search.trials:
            raise SystemExit(f"{search.folder}: its trials have no setting {setting!r}")
        front = mark_front(search.trials, objectives, min_accuracy)
        on_front = set(front.loc[front["is_pareto"], "trial_id"].astype(str))
        trials = search.ran_whole()
        whole.append(trials.assign(on_front=trials["trial_id"].astype(str).isin(on_front)))
    trials = pd.concat(whole, ignore_index=True)
    trials["at_chance"] = trials["best_val_acc"] < min_accuracy
    return trials.groupby(trials[column].astype(str)).agg(
        trials=("trial_id", "size"), best_val_acc=("best_val_acc", "median"),
        gen_gap=("gen_gap", "median"), at_chance=("at_chance", "sum"),
        on_the_front=("on_front", "sum"),
    ).rename_axis(setting)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("searches", nargs="+", type=Path, help="search folders")
    parser.add_argument("--against", type=Path, help="a search to compare at equal trial time")
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"),
                        help="the searches' config: objectives, bounds")  # fmt: skip
    parser.add_argument("--classes", type=int, default=2, help="for the min accuracy")
    parser.add_argument("--by", metavar="SETTING",
                        help="group the trials that ran whole by this sampled setting")  # fmt: skip
    args = parser.parse_args(argv)
    config = load_config(args.config)
    objectives = dict(config.objectives)
    min_accuracy = min_accuracy_for(args.classes)
    searches = [Search.read(folder) for folder in args.searches]
    against = Search.read(args.against) if args.against else None
    frames = [s.trials for s in searches] + ([against.trials] if against else [])
    for frame in frames:
        for name in objectives:
            if name not in frame:
                frame[name] = float("nan")
    bounds = common_bounds(frames, objectives, dict(config.search.hypervolume_bounds))
    rows = []
    for search in [*searches, *([against] if against else [])]:
        row = {
            "search": search.folder.name,
            "trials": len(search.trials),
            "span s": round(search.span_s, 1),
            "trial s": round(search.trial_seconds, 1),
            "stopped early (epoch: trials)": search.stopped_by_epoch() or "-",
            "at chance": int((search.ran_whole()["best_val_acc"] < min_accuracy).sum()),
            "hypervolume": round(hypervolume(search.trials, objectives, bounds, min_accuracy), 4),
        }
        if against is not None and search is not against:
            then = hypervolume(against.ended_within(search.span_s), objectives, bounds,
                               min_accuracy)  # fmt: skip
            row["/ against's at equal trial time"] = (
                round(row["hypervolume"] / then, 3) if then > 0 else float("inf")
            )
        rows.append(row)
    print(f"bounds: {bounds}")
    print(pd.DataFrame(rows).to_string(index=False, na_rep="-"))
    if args.by:
        print(f"\nTrials that ran all their epochs, by {args.by} (medians; at chance: below "
              f"{min_accuracy:g}):")  # fmt: skip
        print(by_setting(searches, args.by, objectives, min_accuracy).round(4).to_string())


if __name__ == "__main__":
    main()
