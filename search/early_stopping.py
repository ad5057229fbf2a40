"""Multi-objective early stopping: a Tune scheduler that stops the trials trailing their
peers at rungs.

Optuna cannot prune multi-objective studies and Tune's ASHA ranks by one metric, so this
follows the idea of multi-objective successive halving (MOASHA): at each rung (an epoch,
e.g. 1, 2 and 4) a trial's objectives so far are compared with those of every trial that
reached the same rung before it. Trials are ranked by how many peers dominate them; one
that is dominated and ranks outside the best `keep` share is stopped.

Domination is the report's: a trial whose `best_val_acc` is below the min accuracy
(chance + 5 points, where the report keeps trials off the front) is dominated by every
peer above it, whatever their objectives; trials on the same side of that line compare
on the objectives. A trial at chance with a gap of 0 is otherwise dominated by nobody,
and such trials used to run all their epochs. Below the line trials are not ranked by how
far below they are: at the first rungs most trials are near chance, and their accuracies
differ by noise. A trial above the line that no peer dominates is never stopped: it could
still be on the front. The trial ends
`status=stopped_early`, with the rung and the trials that dominated it in its detail; the
searcher tells Optuna PRUNED and the report keeps it off the front.

On evidence (a search gives the splits' sizes): each objective carries its standard error
(`trainables.metrics.standard_error`: an accuracy by the binomial of its split, a gap by
the two splits', the throughput by its timed interval, each side of it its own:
`trainables.metrics.error_sides`), and a peer dominates a trial only where it is no worse
on any objective by more than 1.96 standard errors of the difference and better on one by
more than that; across the min accuracy only where it is more accurate by more than that.
Whether a peer is slower beyond the noise weighs how much faster the peer may be and how
much slower the trial: a speed's interval from a few segments is lopsided (one slow
reference block puts a segment far out on one side), and an error from its whole width
let a peer 1.6x slower stop a trial as "no slower beyond the noise" (docs/RESULTS.md,
section 56). At a rung where the trials are within the noise of chance
and of each other, nobody is stopped. A rung counts epochs at a trial's full learning
rate (`rung_epoch`): a trial that warms up over 2 epochs meets rung 1 at epoch 3, among
the trials at their first epoch at full rate. The detail says by how much, in standard
errors, the trial trails the peer it trails most clearly.

A slow start (`slow_start_rungs`, off by default): at its first rung a trial still below
the min accuracy goes on, and the next rung tells a slow start from a trial that learns
nothing. In three searches of the default space 40 of 72 trials were still at chance at
their first epoch at full rate, and a fifth of those ended at 0.80 or more, the most
accurate of one search among them; but such a config often learns on some seeds only, and
searches that spared them chose knees that learned nothing on half their noise-floor seeds
(docs/RESULTS.md, section 33).

Still at chance (`at_chance_after`, the search's default 1; off by default here): from
the rung after that many on (and after any slow start) a trial still below the min
accuracy is stopped as soon as one peer at the rung is above the min accuracy beyond the
noise, whatever `keep` and `min_peers`; between rungs, against the peers at the last
rung it passed (a trial that reached a rung before any peer meets them there, having
trained longer). The share kept is for trials that may still reach the front; with few
peers at a rung (the first trials of a search meet only each other) it let trials that
learned nothing run all their epochs. In three searches run whole, the trials still at
chance at their second or third rung ended at 0.725 or less (docs/RESULTS.md, section
37).

Ahead on accuracy (`ahead_on`; the search's default, `auto`, is `best_val_acc` where it is
an objective): a peer stops a trial
only where it is ahead on one of those objectives (beyond the noise) and behind on none.
Speed alone stops nobody: a trial's throughput at a rung is what it will be at the end,
its accuracy is a forecast, and a slower trial as accurate at a rung ended among the three
most accurate in each of three replayed searches of the default space (docs/RESULTS.md,
section 29).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from ray import tune
from ray.tune.schedulers import TrialScheduler

from analysis.pareto import dominators, minimised
from search.held_ends import HoldsEnds
from trainables.metrics import (
    ASKED,
    STATUS_OK,
    STATUS_STOPPED_EARLY,
    error_sides,
    standard_error,
)
from trainables.settings import DEFAULT_EPOCHS


class RungRecord(NamedTuple):
    """A trial's standing at a rung: its objectives ("lower is better"), whether its
    `best_val_acc` is at or above the min accuracy, each objective's standard error
    (empty: exact, as records saved before the rule weighed evidence) and, where they
    differ, its standard errors below and above the value (empty: `errors` on both sides,
    as records saved before a speed's sides were told apart)."""

    values: tuple[float, ...]
    above_min_accuracy: bool = True
    errors: tuple[float, ...] = ()
    sides: tuple[tuple[float, float], ...] = ()


def rung_verdict(
    record: RungRecord,
    peers: Mapping[str, RungRecord],
    keep: float,
    min_peers: int,
    accuracy_column: int | None = None,
    decisive: Sequence[int] | None = None,
) -> list[str] | None:
    """The peers that dominate a trial arriving at a rung as `record`, when it is to be
    stopped; None when it goes on.

    Stopped: at least `min_peers` trials (itself included) reached the rung, at least one
    dominates it (constrained domination: see the module docstring; on evidence where the
    records carry standard errors, across the min accuracy by `accuracy_column`; ahead
    on one of the `decisive` columns, None: on any), and ceil(keep x trials) or more are
    dominated by fewer trials than it.
    """
    count = len(peers) + 1
    if count < min_peers:
        return None
    ids = list(peers)
    records = [*(peers[i] for i in ids), record]
    matrix = np.array([r.values for r in records], dtype=float)
    errors = None
    if any(r.errors for r in records):
        errors = np.array([side_errors(r) for r in records], dtype=float)
    dominated_by = dominators(matrix, np.array([r.above_min_accuracy for r in records]),
                              errors, accuracy_column, decisive=decisive)  # fmt: skip
    own = dominated_by[-1]
    if not own:
        return None
    ahead = sum(len(others) < len(own) for others in dominated_by)
    if ahead < math.ceil(keep * count):
        return None
    return [ids[i] for i in own]


def side_errors(record: RungRecord) -> list[tuple[float, float]]:
    """Each objective's standard errors (below, above) in `record`: its sides where it
    has them, else its error on both sides (0: exact)."""
    if record.sides:
        return list(record.sides)
    return [(error, error) for error in record.errors or (0.0,) * len(record.values)]


class ParetoEarlyStopping(HoldsEnds):
    """Stops trials that trail at `rungs` (epochs); see the module docstring.

    `stopped` maps each stopped trial to why; `EarlyStoppedStatus` writes it into the
    trial's last result, which everything after the trial reads.
    """

    # `Tuner.restore` unpickles the scheduler a search started with: one saved before the
    # min accuracy (or the evidence) was kept has no such attribute, and goes on with the
    # rule it began with
    min_accuracy: float | None = None
    split_sizes: Mapping[str, int] | None = None
    ahead_on: tuple[str, ...] | None = None
    slow_start_rungs: int = 0
    at_chance_after: int | None = None
    lag: int | None = None
    asked: Mapping[str, int] = MappingProxyType({})  # an old scheduler's: no place known

    def __init__(
        self,
        objectives: Mapping[str, str],
        rungs: Sequence[int],
        keep: float = 0.5,
        min_peers: int = 3,
        min_accuracy: float | None = None,
        split_sizes: Mapping[str, int] | None = None,
        ahead_on: Sequence[str] | None = None,
        slow_start_rungs: int = 0,
        at_chance_after: int | None = None,
        lag: int | None = None,
    ) -> None:
        """`min_accuracy`: the `best_val_acc` below which the report keeps a trial off the
        front (`trainables.metrics.min_accuracy_for` the data's classes); None: none.
        `split_sizes`: images of the "val", "train_eval" and "test" splits, which the
        objectives' standard errors come from (`trainables.metrics.standard_error`): a
        trial is then stopped only on evidence; None: on the values alone. `ahead_on`: the
        objectives a peer must be ahead on to stop a trial (behind on none); None: any.
        `slow_start_rungs`: at that many first rungs a trial below the min accuracy goes
        on (a slow starter is still at chance there). `at_chance_after`: from the rung after
        that many on (and at the epochs after it), a trial still below the min accuracy is
        stopped by one peer above it beyond the noise, whatever `keep` and `min_peers`;
        None: judged as any trial. `lag`: a trial whose config says its place among the
        search's suggestions (`asked`, `search.searcher.InOrder`) is judged against the
        peers `lag` or more places before it only, all of which had ended when it
        started: whatever the order results arrive in, the same peers; None: every peer
        that reached the rung before it."""
        unknown = [name for name in ahead_on or () if name not in objectives]
        if ahead_on is not None and not ahead_on:
            raise ValueError("ahead_on names no objective (None: any objective decides)")
        if unknown:
            raise ValueError(
                f"ahead_on names {unknown}, which are not among the objectives {list(objectives)}"
            )
        super().__init__()
        self.objectives = dict(objectives)
        self.rungs = sorted(rungs)
        self.keep = keep
        self.min_peers = min_peers
        self.min_accuracy = min_accuracy
        self.split_sizes = dict(split_sizes) if split_sizes else None
        self.ahead_on = tuple(ahead_on) if ahead_on is not None else None
        self.slow_start_rungs = slow_start_rungs
        self.at_chance_after = at_chance_after
        self.lag = lag
        self.stopped: dict[str, str] = {}  # trial id -> why
        self.seen: dict[int, dict[str, RungRecord]] = {}  # rung -> trial -> its standing
        self.asked = {}  # trial id -> its place among the suggestions

    def decide(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        last_epoch = trial.config.get("epochs", DEFAULT_EPOCHS)
        warmup = int(trial.config.get("warmup_epochs", 0) or 0)
        stop = self.verdict(trial.trial_id, result, last_epoch, warmup, trial.config.get(ASKED))
        return TrialScheduler.STOP if stop else TrialScheduler.CONTINUE

    def ended_result(self, trial_id: str, result: dict[str, Any], decision: str) -> dict[str, Any]:
        """A stopped trial's last result as it ends: marked as `EarlyStoppedStatus` marks it."""
        if decision != TrialScheduler.STOP:
            return result
        return {**result, **stopped_early(self.stopped[trial_id])}

    def peers_at(self, rung: int, trial_id: str) -> dict[str, RungRecord]:
        """The trials a trial is judged against at `rung`: those that reached it, but
        itself (its own earlier report, from a restart older than the rung, it replaces);
        with a lag and the trial's place known, only those `lag` or more places before it."""
        seen = self.seen.get(rung, {})
        place = self.asked.get(trial_id)
        if self.lag is None or place is None:
            return {peer: kept for peer, kept in seen.items() if peer != trial_id}
        return {peer: kept for peer, kept in seen.items()
                if self.asked.get(peer, math.inf) <= place - self.lag}  # fmt: skip

    @property
    def peers_were(self) -> str:
        """How the detail of a stopped trial names its peers."""
        if self.lag is None:
            return "trials that reached it before"
        return f"trials suggested {self.lag} or more places before it that reached it"

    def verdict(
        self,
        trial_id: str,
        result: Mapping[str, Any],
        last_epoch: int,
        warmup_epochs: int = 0,
        asked: int | None = None,
    ) -> bool:
        """Whether the trial `trial_id` stops at `result`, of a run of `last_epoch` epochs
        whose learning rate warms up over `warmup_epochs`; a stop is recorded in `stopped`
        with why. Every result of every trial passes here, in the order the results
        arrive: a trial is compared with those before it. A rung counts a trial's epochs
        at its full rate (`rung_epoch`): one that warms up over 2 epochs meets rung 1 at
        epoch 3, among the trials at their first epoch at full rate. Between rungs, a trial
        still at chance is compared with the peers at the last rung it passed
        (`still_at_chance_after`): a trial that reached a rung before any peer did meets them
        there, having trained longer than they had. `asked`: the trial's place among the
        search's suggestions, which with a `lag` decides its peers (`peers_at`)."""
        if asked is not None and self.asked.get(trial_id) != asked:
            self.asked = {**self.asked, trial_id: int(asked)}
        epoch = result.get("epoch")
        if epoch is None or result.get("status", STATUS_OK) != STATUS_OK:
            return False
        record = self.record_of(result)
        rung_at = self.rung_epochs(warmup_epochs)
        if epoch not in rung_at:
            # between rungs only a trial still at chance is judged, on its accuracy alone:
            # an objective it does not report at this epoch (a gap whose best epoch went
            # unscored) does not keep it from that
            record = record or self.record_at_chance(result)
            accuracy = float(result.get("best_val_acc", math.nan))
            return (
                record is not None
                and epoch != last_epoch
                and self.still_at_chance_after(trial_id, record, accuracy, epoch, rung_at)
            )
        # still at chance, a trial that does not report an objective at the rung (a gap
        # whose best epoch went unscored) is judged all the same, the NaN its worst (ahead on
        # accuracy, the default: on its accuracy alone), as between rungs; above the min
        # accuracy it is not comparable: it goes on, and is not a peer whose NaN would count
        # as the worst value
        record = record or self.record_at_chance(result)
        if record is None:
            return False
        rung = rung_at[epoch]
        peers = self.peers_at(rung, trial_id)
        dominating = rung_verdict(record, peers, self.keep, self.min_peers,
                                  self.accuracy_column, self.decisive_columns)  # fmt: skip
        rung_index = self.rungs.index(rung)
        # kept by the share or too few peers, but still at chance where others learn
        at_chance = dominating is None and self.still_at_chance(record, rung_index)
        if at_chance:
            dominating = self.clearly_learning(record, peers)
        self.seen.setdefault(rung, {})[trial_id] = record
        if dominating is None or epoch == last_epoch:  # nothing left to save
            return False
        if not record.above_min_accuracy and rung_index < self.slow_start_rungs:
            return False  # at chance: not learning yet, or a slow start the next rung tells
        where = f"rung {rung_index + 1} of {len(self.rungs)}"
        if warmup_epochs:
            where += f", its epoch {rung} at full rate after {warmup_epochs} of warmup"
        # "dominated on throughput" by a slower peer read as a contradiction: on evidence
        # a peer dominates where it is worse on nothing beyond the noise
        noise = " beyond the noise" if self.split_sizes is not None else ""
        behind = f", and behind on {' or '.join(self.ahead_on)}" if self.ahead_on else ""
        how = f"dominated (no better{noise} on {', '.join(self.objectives)}{behind}) by"
        if not record.above_min_accuracy:
            how = (
                f"best_val_acc {float(result['best_val_acc']):.3f} below the min accuracy "
                f"{self.min_accuracy:.3f} (so behind every trial above it), dominated by"
            )
        if at_chance:
            how = self.at_chance_how(float(result["best_val_acc"]), passed=rung_index)
        self.stopped[trial_id] = (
            f"stopped at epoch {epoch} ({where}): {how} "
            f"{len(dominating)} of the {len(peers)} {self.peers_were} "
            f"({', '.join(sorted(dominating))}){self.trailing(record, dominating, peers)}"
        )
        return True

    def record_of(self, result: Mapping[str, Any]) -> RungRecord | None:
        """A result's standing: its objectives, whether it is above the min accuracy and,
        on evidence, each objective's standard error; None where an objective is NaN."""
        values = tuple(minimised(result, self.objectives))
        if any(math.isnan(value) for value in values):
            return None
        return RungRecord(values, self.above_min_accuracy(result), self.errors_of(result),
                          self.sides_of(result))  # fmt: skip

    def errors_of(self, result: Mapping[str, Any]) -> tuple[float, ...]:
        """Each objective's standard error in `result`, on evidence; else none (exact)."""
        if self.split_sizes is None:
            return ()
        return tuple(standard_error(name, result, self.split_sizes) for name in self.objectives)

    def sides_of(self, result: Mapping[str, Any]) -> tuple[tuple[float, float], ...]:
        """Each objective's standard errors below and above its value in `result`, "lower
        is better" as the record's values (a maximised objective's sides turned over), on
        evidence; else none."""
        if self.split_sizes is None:
            return ()
        sides = []
        for name, goal in self.objectives.items():
            below, above = error_sides(name, result, self.split_sizes)
            sides.append((above, below) if goal == "max" else (below, above))
        return tuple(sides)

    def record_at_chance(self, result: Mapping[str, Any]) -> RungRecord | None:
        """A result below the min accuracy as a record, whatever its other objectives (NaN
        counts as the worst, and across the min accuracy only the accuracy decides); None
        where it is not below it, has no accuracy, or the search has no min accuracy or
        does not seek best_val_acc."""
        accuracy = float(result.get("best_val_acc", math.nan))
        if self.min_accuracy is None or self.accuracy_column is None:
            return None
        if not accuracy < self.min_accuracy:  # NaN too
            return None
        return RungRecord(tuple(minimised(result, self.objectives)), False,
                          self.errors_of(result), self.sides_of(result))  # fmt: skip

    def rung_epochs(self, warmup_epochs: int) -> dict[int, int]:
        """The epoch at which a trial warming up over `warmup_epochs` meets each rung."""
        return {rung_epoch(rung, warmup_epochs): rung for rung in self.rungs}

    def still_at_chance_after(
        self,
        trial_id: str,
        record: RungRecord,
        accuracy: float,
        epoch: int,
        rung_at: Mapping[int, int],
    ) -> bool:
        """Between rungs: whether the trial, still at chance (`accuracy`) at `epoch`, is
        stopped by a peer above the min accuracy beyond the noise at the last rung it
        passed (`rung_at`: the epoch at which it meets each rung, `rung_epochs`; a peer
        there had trained no longer than it has now)."""
        passed = [rung for epoch_at, rung in rung_at.items() if epoch_at < epoch]
        if not passed:
            return False
        rung = max(passed)
        rung_index = self.rungs.index(rung)
        if not self.still_at_chance(record, rung_index):
            return False
        peers = self.peers_at(rung, trial_id)
        dominating = self.clearly_learning(record, peers)
        if dominating is None:
            return False
        self.stopped[trial_id] = (
            f"stopped at epoch {epoch} (after rung {rung_index + 1} of {len(self.rungs)}): "
            f"{self.at_chance_how(accuracy, passed=rung_index + 1)} "
            f"{len(dominating)} of the {len(peers)} trials at that rung "
            f"({', '.join(sorted(dominating))}){self.trailing(record, dominating, peers)}"
        )
        return True

    def at_chance_how(self, accuracy: float, passed: int) -> str:
        """Why a trial still at chance after `passed` rungs was stopped, up to whom."""
        return (
            f"still at chance, best_val_acc {accuracy:.3f} below the min "
            f"accuracy {self.min_accuracy:.3f} after {passed} "
            f"rung{'s' if passed > 1 else ''} (stopped by any trial above it beyond the "
            "noise), dominated by"
        )

    def still_at_chance(self, record: RungRecord, rung_index: int) -> bool:
        """Whether `record`, at the rung `rung_index` (from 0), is a trial still below the
        min accuracy after `at_chance_after` rungs: one peer above it stops it."""
        return (
            self.at_chance_after is not None
            and self.min_accuracy is not None
            and not record.above_min_accuracy
            and rung_index >= max(self.at_chance_after, self.slow_start_rungs)
        )

    def clearly_learning(
        self, record: RungRecord, peers: Mapping[str, RungRecord]
    ) -> list[str] | None:
        """The peers above the min accuracy that dominate `record` (across the min
        accuracy: more accurate beyond the noise, where the records carry errors), keep
        and min peers aside; None: none does."""
        learning = {peer: kept for peer, kept in peers.items() if kept.above_min_accuracy}
        return rung_verdict(record, learning, keep=0.0, min_peers=2,
                            accuracy_column=self.accuracy_column,
                            decisive=self.decisive_columns)  # fmt: skip

    @property
    def decisive_columns(self) -> list[int] | None:
        """Where the `ahead_on` objectives are among the objectives; None: any decides."""
        if self.ahead_on is None:
            return None
        return [list(self.objectives).index(name) for name in self.ahead_on]

    @property
    def accuracy_column(self) -> int | None:
        """Where `best_val_acc` is among the objectives: what the min accuracy is on."""
        names = list(self.objectives)
        return names.index("best_val_acc") if "best_val_acc" in names else None

    def trailing(
        self, record: RungRecord, dominating: Sequence[str], peers: Mapping[str, RungRecord]
    ) -> str:
        """By how much, and with what certainty, the trial trails the peer it trails most
        clearly: the objective furthest behind in standard errors of the difference, among
        those that decided it: below the min accuracy the accuracy, else the `ahead_on`
        objectives (a tight throughput interval would otherwise name the speed, which did
        not decide)."""
        if not record.errors:
            return ""
        columns = list(enumerate(self.objectives))
        deciding = self.decisive_columns
        if not record.above_min_accuracy and self.accuracy_column is not None:
            deciding = [self.accuracy_column]
        best = None
        if deciding is not None:
            best = furthest_behind(record, dominating, peers, [columns[i] for i in deciding])
        best = best or furthest_behind(record, dominating, peers, columns)
        if best is None:
            return ""
        sigmas, name, peer_id, column, peer = best
        sign = -1 if self.objectives[name] == "max" else 1
        return (
            f"; it trails {peer_id} most on {name}: {sign * record.values[column]:.4g} "
            f"against {sign * peer.values[column]:.4g}, {sigmas:.1f} standard errors apart"
        )

    def above_min_accuracy(self, result: Mapping[str, Any]) -> bool:
        """Whether the result's `best_val_acc` is at or above the min accuracy: as the
        report judges it, NaN is not; True where there is no min accuracy, or no
        `best_val_acc` in the result to judge."""
        if self.min_accuracy is None or "best_val_acc" not in result:
            return True
        return float(result["best_val_acc"]) >= self.min_accuracy


def rung_epoch(rung: int, warmup_epochs: int = 0) -> int:
    """The epoch at which a trial whose learning rate warms up over `warmup_epochs` meets
    `rung`: its `rung`-th epoch at full rate, so that a rung compares trials that trained
    as long at their own rate (a trial inside its warmup is not yet at it)."""
    return rung + warmup_epochs


def furthest_behind(
    record: RungRecord,
    dominating: Sequence[str],
    peers: Mapping[str, RungRecord],
    columns: Sequence[tuple[int, str]],
) -> tuple[float, str, str, int, RungRecord] | None:
    """(standard errors of the difference, objective, peer, column, the peer's record) of
    the objective among `columns` (index, name) on which `record` trails a dominating peer
    furthest; None: it trails none on them."""
    best = None
    own = side_errors(record)
    for peer_id in dominating:
        peer = peers[peer_id]
        theirs = side_errors(peer) if peer.errors else own
        for column, name in columns:
            behind = record.values[column] - peer.values[column]
            # the sides facing each other: how much lower it may be, how much higher the peer
            error = math.hypot(own[column][0], theirs[column][1])
            if behind > 0 and error > 0 and (best is None or behind / error > best[0]):
                best = (behind / error, name, peer_id, column, peer)
    return best


def replay(
    scheduler: ParetoEarlyStopping,
    histories: pd.DataFrame,
    last_epochs: Mapping[str, int],
    warmup_epochs: Mapping[str, int] | None = None,
    asked: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """The epoch at which `scheduler` would have stopped each trial it stops, had it watched
    the search whose epochs `histories` holds (columns `trial_id`, `epoch`, `timestamp`,
    `time_total_s` and the objectives; `analysis.load.histories_from_tune`): what a
    stopping rule would have saved and lost, read off a finished search.

    Results are taken in the order they were reported (`arrival_times`), which is the order
    they reached the driver unless two came within its event loop's turn. A search run
    with `scheduler`'s own settings replays to the trials it stopped; one run without
    early stopping must have scored `gen_gap` at the rungs (`train.gap_epochs`). A
    scheduler with a min accuracy needs `best_val_acc` in `histories` too. `warmup_epochs`:
    each trial's, as the live scheduler reads it from the trial's config (its rungs
    counted from the end of its warmup, `rung_epoch`); none given: no trial warms up.
    `asked`: each trial's place among the search's suggestions (its config's `asked`),
    which a scheduler with a lag judges its peers by; none given: every trial unplaced.
    """
    if scheduler.min_accuracy is not None and "best_val_acc" not in histories:
        raise ValueError(
            "the scheduler keeps a min accuracy: `histories` must hold `best_val_acc`, but "
            f"has only {list(histories.columns)}"
        )
    stops: dict[str, int] = {}
    ordered = histories.assign(arrival=arrival_times(histories)).sort_values(
        "arrival", kind="stable"
    )
    for result in ordered.to_dict("records"):
        trial_id = str(result["trial_id"])
        if trial_id in stops:
            continue
        warmup = (warmup_epochs or {}).get(trial_id, 0)
        place = (asked or {}).get(trial_id)
        if scheduler.verdict(trial_id, result, last_epochs[trial_id], warmup, place):
            stops[trial_id] = int(result["epoch"])
    return stops


def arrival_times(histories: pd.DataFrame) -> pd.Series:
    """When each result was reported, finer than Tune's whole-second `timestamp`: a trial
    reports at its start plus `time_total_s`, so each of its results places the start in
    [timestamp - time_total_s, that + 1 s); the middle of where they all agree, plus the
    result's `time_total_s`, kept within the result's own second (a trial restored after a
    failure, whose clock paused, keeps to its timestamps)."""
    earliest = histories["timestamp"] - histories["time_total_s"]
    by_trial = earliest.groupby(histories["trial_id"])
    start = (by_trial.max() + by_trial.min() + 1) / 2
    estimate = histories["trial_id"].map(start) + histories["time_total_s"]
    seconds = histories["timestamp"]
    return estimate.clip(lower=seconds, upper=seconds + 0.999)


class EarlyStoppedStatus(tune.Callback):
    """Marks the last result of a trial the scheduler stopped as `stopped_early`, before
    the MLflow callback, Tune's loggers and the searcher read it (Tune lets callbacks
    change a result in place; it goes list order, so this one comes first)."""

    def __init__(self, scheduler: ParetoEarlyStopping) -> None:
        self.scheduler = scheduler

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        detail = self.scheduler.stopped.get(trial.trial_id)
        # held at its stop: its last result, not yet `done` (a trial rerun after a restore,
        # held at its last epoch, keeps its result)
        held = self.scheduler.held.get(trial.trial_id) == TrialScheduler.STOP
        if detail is not None and (result.get("done") or held):
            result.update(stopped_early(detail))

    # Tune saves callbacks' state with the experiment, not the scheduler's: the rungs'
    # records travel here, so a resumed search compares trials with the same peers.
    def get_state(self) -> dict[str, Any]:
        return {
            "seen": self.scheduler.seen,
            "stopped": self.scheduler.stopped,
            "asked": dict(self.scheduler.asked),
        }  # fmt: skip (a plain dict pickles)

    def set_state(self, state: dict[str, Any]) -> None:
        # a search saved before the min accuracy kept plain tuples of objectives
        self.scheduler.seen = {
            rung: {trial: _as_record(kept) for trial, kept in trials.items()}
            for rung, trials in state["seen"].items()
        }
        self.scheduler.stopped = state["stopped"]
        self.scheduler.asked = dict(state.get("asked", {}))  # none before places were kept


def stopped_early(detail: str) -> dict[str, str]:
    """What marks the last result of a trial the rule stopped."""
    return {"status": STATUS_STOPPED_EARLY, "status_detail": detail}


def _as_record(kept: Any) -> RungRecord:
    """A peer's record as saved: a `RungRecord`, or before the min accuracy was kept, its
    objectives alone (counted above the line, as the rule then had it)."""
    if isinstance(kept, RungRecord):
        return kept
    return RungRecord(tuple(kept), True)
