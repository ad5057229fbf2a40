"""The table printed while a search runs: a line saying how far it is, then a row per trial
with its sampled settings and its last epoch's objectives under short headers.

Tune's own table (`CLIReporter`) adds a column of each trial's node address and process,
pads every cell in a grid and prints numbers to nine digits: the main search's table was
213 columns wide. This one is a `tune.ProgressReporter` (Tune's public interface for a
reporter) that prints the settings as the ranked table at the end prints them (four
significant digits, "-" for nothing yet), about 130 columns for the main search.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from ray import tune

from analysis.flat import as_shown

# Seconds between two tables while trials run; the last is printed when the search ends.
EVERY_SECONDS = 15.0
# Rows of a table while trials run (the unfinished first, then the latest to end); the
# last table has every trial.
MAX_ROWS = 20
# The statuses of trials not ended, as the heading counts them first.
UNFINISHED = ("RUNNING", "PENDING", "PAUSED")


class ProgressTable(tune.ProgressReporter):
    """`settings`: sampled setting -> its header; `metrics`: a key of the trials' results ->
    its header (`search.tuner.progress_columns`)."""

    def __init__(
        self,
        settings: Mapping[str, str],
        metrics: Mapping[str, str],
        every_s: float = EVERY_SECONDS,
        say: Callable[[str], None] | None = None,
    ) -> None:
        """`say`: where a table goes (None: printed; Tune pickles the reporter with the
        search's state, so no function is kept by default)."""
        self.settings = dict(settings)
        self.metrics = dict(metrics)
        self.every_s = every_s
        self.say = say
        self.started = time.time()
        self.total: int | None = None
        self._last = -float("inf")

    def setup(
        self, start_time: float | None = None, total_samples: int | None = None, **kwargs: Any
    ) -> None:
        self.started = start_time or self.started
        self.total = total_samples

    def should_report(self, trials: Sequence[Any], done: bool = False) -> bool:
        return done or time.monotonic() - self._last >= self.every_s

    def report(self, trials: Sequence[Any], done: bool, *sys_info: str) -> None:
        self._last = time.monotonic()
        rows = [TrialRow.of(trial) for trial in trials]
        text = self.render(rows, done)
        # Of what Tune passes besides (its scheduler's name, the resources in use), the
        # resources: on a card, how many trials share it.
        used = [line for line in sys_info if line.startswith("Logical resource usage")]
        if used:
            heading, _, table = text.partition("\n")
            text = "\n".join([heading, *used, table])
        if self.say is None:
            print(text, flush=True)
        else:
            self.say(text)

    def render(self, rows: Sequence[TrialRow], done: bool) -> str:
        """The heading and the table of `rows` (all when `done`, else at most `MAX_ROWS`)."""
        heading = progress_heading(rows, self.total, time.time() - self.started)
        if not rows:
            return heading
        shown = rows if done else rows_to_show(rows, MAX_ROWS)
        table = pd.DataFrame(
            [
                {
                    "trial": row.trial_id,
                    "status": row.status,
                    **{header: _cell(row.config.get(key)) for key, header in self.settings.items()},
                    **{header: _cell(row.result.get(key)) for key, header in self.metrics.items()},
                }
                for row in shown
            ]
        )
        text = table.to_string(index=False)
        hidden = len(rows) - len(shown)
        more = f"\n... and {hidden} more trials, ended" if hidden else ""
        return f"{heading}\n{text}{more}\n"


@dataclass(frozen=True)
class TrialRow:
    """What the table reads of a Tune trial: its id, status, config and last result."""

    trial_id: str
    status: str
    config: Mapping[str, Any]
    result: Mapping[str, Any]

    @classmethod
    def of(cls, trial: Any) -> TrialRow:
        return cls(str(trial.trial_id), str(trial.status), trial.config, trial.last_result or {})


def progress_heading(rows: Sequence[TrialRow], total: int | None, elapsed_s: float) -> str:
    """ "== 1 min 05 s: 12 of 24 trials ended; 2 RUNNING, 10 TERMINATED ==" (the count of each
    status, unfinished first)."""
    counts = pd.Series([row.status for row in rows], dtype=object).value_counts()
    ended_statuses = [status for status in counts.index if status not in UNFINISHED]
    order = [*(status for status in UNFINISHED if status in counts), *ended_statuses]
    ended = sum(int(counts[status]) for status in ended_statuses)
    of = f" of {total}" if total else ""
    minutes, seconds = divmod(int(elapsed_s), 60)
    clock = f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"
    statuses = ", ".join(f"{int(counts[s])} {s}" for s in order) or "none started"
    return f"== {clock}: {ended}{of} trials ended; {statuses} =="


def rows_to_show(rows: Sequence[TrialRow], most: int) -> list[TrialRow]:
    """The unfinished trials, then the latest to end (rows in Tune's order: by start), at
    most `most` in all, in Tune's order."""
    unfinished = [row for row in rows if row.status in UNFINISHED]
    ended = [row for row in rows if row.status not in UNFINISHED]
    keep = {id(row) for row in [*unfinished, *ended[::-1]][:most]}
    return [row for row in rows if id(row) in keep]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return as_shown(value)
