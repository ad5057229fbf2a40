"""Fitting that survives what long searches meet: Ray's memory monitor killing a trial
(which Ray 2.60 turns into an abort of the whole `Tuner.fit`), and interruptions.

A fit ends in one of three ways: finished (every trial ended: returned, stopped or raised),
interrupted (Ctrl-C: Tune saved its state and returned early), or stopped by the host's
memory monitor more often than it may be resumed automatically. The last two leave a
search that `--resume` continues.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Callable
from dataclasses import dataclass

import ray.exceptions
from ray import tune

from search.cli import handler_put_back
from trainables.data.errors import first_line
from trainables.metrics import is_last_report
from trainables.settings import DEFAULT_EPOCHS

MEMORY_MONITOR_MESSAGE = "running low on memory"  # Ray's words when its monitor kills


class Outcome(enum.Enum):
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    HOST_MEMORY = "host memory"


@dataclass(frozen=True)
class FitResult:
    outcome: Outcome
    automatic_resumes: int  # how often the fit was restored after the memory monitor
    detail: str = ""


def is_host_memory_kill(error: BaseException) -> bool:
    """Ray's memory monitor killed a worker: `OutOfMemoryError`, possibly wrapped."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ray.exceptions.OutOfMemoryError):
            return True
        if MEMORY_MONITOR_MESSAGE in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def fit_with_recovery(
    first_tuner: Callable[[], tune.Tuner],
    restored_tuner: Callable[[], tune.Tuner],
    expected_trials: int | Callable[[tune.ResultGrid], int],
    automatic_resumes: int,
    say: Callable[[str], None],
) -> FitResult:
    """Fit; after a memory-monitor kill, restore and fit again, up to `automatic_resumes`.
    `expected_trials`: the trials a finished fit ended, or how to count them from its
    results (a plan that decides its later trials on its earlier ones' results)."""
    make = first_tuner
    for attempt in range(automatic_resumes + 1):
        try:
            grid = fit_putting_sigint_back(make())
        except Exception as error:
            if not is_host_memory_kill(error):
                raise
            detail = first_line(error, limit=200)
            if attempt == automatic_resumes:
                return FitResult(Outcome.HOST_MEMORY, attempt, detail)
            say(
                f"Ray's memory monitor killed a trial ({detail}); continuing the search from "
                f"its saved state ({attempt + 1} of {automatic_resumes} automatic resumes)"
            )
            make = restored_tuner
            continue
        done = trials_ended(grid)
        expected = expected_trials(grid) if callable(expected_trials) else expected_trials
        if done < expected:
            return FitResult(Outcome.INTERRUPTED, attempt, f"{done} of {expected} trials finished")
        return FitResult(Outcome.FINISHED, attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def fit_putting_sigint_back(tuner: tune.Tuner) -> tune.ResultGrid:
    """`tuner.fit()`, with the SIGINT handler it replaced put back after: Tune puts it back
    only once interrupted, so a Ctrl-C after a fit that ended (while the report is
    written) would be taken as one for that fit, and do nothing."""
    with handler_put_back(signal.SIGINT):
        return tuner.fit()


def trials_ended(grid: tune.ResultGrid) -> int:
    """The trials of a fit that ended (`ended`). Not read off the trials' statuses: an
    interrupted fit's clean-up marks every trial TERMINATED, those still pending or
    running too."""
    return sum(1 for result in grid if ended(result))


def ended(result: tune.Result) -> bool:
    """Whether a trial's last result is its last: it raised; Tune marked it `done` (the
    trainable returned, or the scheduler stopped it); or, as a trial restored from a
    stopped search reads (its `done` is not kept), it was pruned, stopped or reached its
    last epoch. A trial that never reported has ended only where it raised."""
    metrics = result.metrics or {}
    if result.error is not None or metrics.get("done"):
        return True
    return is_last_report(metrics, (result.config or {}).get("epochs", DEFAULT_EPOCHS))
