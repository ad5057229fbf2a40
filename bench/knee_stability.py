"""Whether runs of one search agree on its knee: each finished search's knee read again from
its report's table, by the front's range alone and on evidence, and how often the runs
chose the same config by each.

The knee (the front trial nearest the ideal point, `analysis.pareto.balanced_front`) is
where the ablations start, so a knee that moves from run to run moves the answer with it.
Scaled by the front's range alone, an objective whose front values lie within their noise
(gaps of 0.08-0.12 a standard error of 0.035 apart) weighs as much as one the trials are
told apart on; on evidence, each objective is scaled by its range or by 1.96 standard
errors of a difference (`analysis.pareto.told_apart`), whichever is wider (docs/RESULTS.md,
section 50). Printed per folder: each rule's knee and its config (the sampled settings);
at the end, per rule, how many distinct configs the runs' knees were, the most runs that
chose one, and the pairs of runs that agree.

    python bench/knee_stability.py --from RUN1/ray_results/NAME [RUN2/... ...]

Each folder is a search's results folder (its `report/trials.csv` and `search_state.json`;
the splits' sizes are read from its MLflow parent run, as `python -m analysis.report` does).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import pandas as pd

from analysis.load import CONFIG_PREFIX, settings_text
from analysis.pareto import knee_point
from analysis.report import split_sizes_from_parent
from search.experiment import STATE_FILE, SearchState

RULES = ("by range", "on evidence")


def knees(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({rule: knee's trial id}, {rule: its config as text}) of one finished search."""
    state = SearchState.load(folder)
    if state is None:
        raise SystemExit(f"{folder}: no {STATE_FILE}: not a search's results folder")
    config = state.config
    objectives = config["search"]["objectives"]
    splits = split_sizes_from_parent(state.parent_run().data.tags)
    if splits is None:
        raise SystemExit(f"{folder}: its MLflow parent run does not say the splits' sizes "
                         "(a search from before 2026-12-06): run it again")  # fmt: skip
    table = pd.read_csv(folder / "report" / "trials.csv")
    if f"{CONFIG_PREFIX}ablation" in table:  # the ablations' trials are never on the front
        table = table[table[f"{CONFIG_PREFIX}ablation"].isna()]
    sampled = [
        f"{CONFIG_PREFIX}{key}" for key in config["space"] if f"{CONFIG_PREFIX}{key}" in table
    ]
    chosen = {"by range": knee_point(table, objectives),
              "on evidence": knee_point(table, objectives, splits)}  # fmt: skip
    ids = {rule: str(table.loc[index, "trial_id"]) for rule, index in chosen.items()}
    settings = {rule: settings_text(table.loc[index], sampled) for rule, index in chosen.items()}
    return ids, settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="folders", nargs="+", type=Path, required=True,
                        help="finished searches' results folders")  # fmt: skip
    args = parser.parse_args(argv)
    chosen: dict[str, list[str]] = {rule: [] for rule in RULES}
    for folder in args.folders:
        if not (folder / "report" / "trials.csv").is_file():
            parser.error(f"{folder} holds no report/trials.csv: not a finished search's folder")
        ids, settings = knees(folder)
        for rule in RULES:
            print(f"{folder}: knee {rule}: {ids[rule]} ({settings[rule]})", flush=True)
            chosen[rule].append(settings[rule])
    runs = len(args.folders)
    for rule, configs in chosen.items():
        counts = collections.Counter(configs)
        pairs = sum(n * (n - 1) // 2 for n in counts.values())
        print(f"{rule}: {len(counts)} distinct knee configs in {runs} runs, the most common in "
              f"{counts.most_common(1)[0][1]}; {pairs} of {runs * (runs - 1) // 2} pairs of runs "
              "agree")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
