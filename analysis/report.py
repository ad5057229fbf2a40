"""The report of a search: the trials table with Pareto flags (CSV) and the front chart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.charts import pairwise_front_chart
from analysis.pareto import mark_front


@dataclass(frozen=True)
class Report:
    frame: pd.DataFrame  # one row per trial, with pareto_rank and is_pareto, front first
    files: tuple[Path, ...]  # what was written, for logging as artifacts


def write_report(
    frame: pd.DataFrame, objectives: Mapping[str, str], out_dir: Path, title: str = ""
) -> Report:
    marked = mark_front(frame, objectives)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = out_dir / "trials.csv"
    marked.to_csv(table, index=False)
    chart = pairwise_front_chart(marked, objectives, out_dir / "pareto_front.png", title=title)
    return Report(frame=marked, files=(table, chart))
