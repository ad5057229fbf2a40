"""One speed for the configs that do the same work per image: a pure function of the trials
table, tested alone.

Two configs that differ only in the learning rate, its warmup or the seed
(`trainables.settings.SAME_WORK_PER_IMAGE`) run the same steps on the same tensors: their
speeds are one quantity, which each trial timed at its own moment. Ranked on their own
figures, the faster by the machine's drift of that moment would stand on the front, or be
chosen as the knee, for a speed its learning rate cannot have, while the ablations say of the
same change "none by construction". So the search's trials of one work share one figure:

- `throughput` becomes the geometric mean of the group's timed figures, the trial's own kept
  as `trial_throughput`, and `same_work_trials` says how many were pooled;
- its interval (`throughput_low`, `throughput_high`) spans the members' own intervals and
  every member's figure: each was timed at another moment, and how far those moments
  disagree is part of what is known of the config's speed on this machine;
- `time_to_target_s` is the images until the target at that speed: the trial's timed part
  scaled by own / pooled (where nothing was compiled, so that all of it was timed).

A trial whose batch changed as it trained (AdaBatch, or a rule growing it) trained at a mix
of batches that depends on how many epochs it ran: it is pooled only with trials of the
same settings that ran as many epochs. Trials that ended without a speed of their own
(errors, memory, divergence: NaN is kept, and a diverged loss can change what a step costs)
take part in nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.load import CONFIG_PREFIX, setting_columns
from trainables.metrics import STATUS_OK, STATUS_STOPPED_EARLY
from trainables.settings import SAME_WORK_PER_IMAGE

# the trial's own timed speed, before pooling (`analysis.repeats` spreads repeats by it)
TRIAL_THROUGHPUT = "trial_throughput"
SAME_WORK_TRIALS = "same_work_trials"  # trials whose speeds the throughput pools
POOLED_STATUSES = frozenset({STATUS_OK, STATUS_STOPPED_EARLY})  # trained as configured
_GROWN = ("adabatch_growth", "adabatch_rule")  # what makes a trial's batch change as it trains


def work_columns(frame: pd.DataFrame) -> list[str]:
    """The settings that decide a step's work: every setting but those of
    `SAME_WORK_PER_IMAGE`."""
    same = {f"{CONFIG_PREFIX}{key}" for key in SAME_WORK_PER_IMAGE}
    return [column for column in setting_columns(frame) if column not in same]


def _batch_changes(frame: pd.DataFrame) -> pd.Series:
    """Per trial, whether its batch may have changed as it trained."""
    changes = pd.Series(False, index=frame.index)
    growth = frame.get(f"{CONFIG_PREFIX}adabatch_growth")
    if growth is not None:
        changes |= pd.to_numeric(growth, errors="coerce").fillna(1) != 1
    rule = frame.get(f"{CONFIG_PREFIX}adabatch_rule")
    if rule is not None:
        changes |= rule.fillna("interval").astype(str) != "interval"
    return changes


def pool_same_work(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with one throughput per work (see the module docstring); unchanged where no
    two timed trials share a work."""
    if "throughput" not in frame or frame.empty:
        return frame
    speed = pd.to_numeric(frame["throughput"], errors="coerce")
    # results without a status (a frame built by hand) are trials that trained
    trained = frame["status"].isin(POOLED_STATUSES) if "status" in frame else True
    timed = trained & (speed > 0) & np.isfinite(speed)
    columns = work_columns(frame)
    if not columns or timed.sum() < 2:
        return frame
    # compared as text, as `analysis.repeats` does: a setting may be a list
    keys = frame[columns].map(repr).agg("|".join, axis=1)
    epochs = frame["epoch"].map(repr) if "epoch" in frame else pd.Series("", index=frame.index)
    keys = keys.where(~_batch_changes(frame), keys + "|epochs=" + epochs)
    groups = {key: index for key, index in frame[timed].groupby(keys[timed]).groups.items()
              if len(index) > 1}  # fmt: skip
    if not groups:
        return frame
    pooled = frame.copy()
    pooled[TRIAL_THROUGHPUT] = speed
    pooled[SAME_WORK_TRIALS] = 1
    for index in groups.values():
        _pool(pooled, index)
    return pooled


def _pool(frame: pd.DataFrame, index: pd.Index) -> None:
    """Give the trials at `index` their pooled speed, in place."""
    own = frame.loc[index, TRIAL_THROUGHPUT].to_numpy(dtype=float)
    speed = float(np.exp(np.log(own).mean()))
    low, high = own.min(), own.max()
    for end, pick, combine in (("low", np.nanmin, min), ("high", np.nanmax, max)):
        column = f"throughput_{end}"
        if column in frame:
            ends = pd.to_numeric(frame.loc[index, column], errors="coerce").to_numpy(float)
            if np.isfinite(ends).any():
                value = combine(float(pick(ends)), low if end == "low" else high)
            else:
                value = low if end == "low" else high
            frame.loc[index, column] = value
    if "time_to_target_s" in frame:
        to_target = pd.to_numeric(frame.loc[index, "time_to_target_s"], errors="coerce")
        compiled = pd.to_numeric(frame.loc[index, "compile_s"], errors="coerce").fillna(0) \
            if "compile_s" in frame else pd.Series(0.0, index=index)  # fmt: skip
        scalable = (np.isfinite(to_target) & (compiled == 0)).to_numpy()
        frame.loc[index[scalable], "time_to_target_s"] = (
            to_target.to_numpy()[scalable] * own[scalable] / speed
        )
    frame.loc[index, "throughput"] = speed
    frame.loc[index, SAME_WORK_TRIALS] = len(index)


def pooled_note(frame: pd.DataFrame) -> str:
    """What a reader of the throughput column should know: which trials share a speed
    (empty where none do)."""
    if SAME_WORK_TRIALS not in frame:
        return ""
    shared = int((pd.to_numeric(frame[SAME_WORK_TRIALS], errors="coerce") > 1).sum())
    if not shared:
        return ""
    return (
        f"{shared} of {len(frame)} trials share a speed with others of the same "
        "work per image (they differ only in the learning rate, its warmup or the seed): the "
        f"geometric mean of their own timings ({TRIAL_THROUGHPUT} keeps each trial's)."
    )
