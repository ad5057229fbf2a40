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

Each value pooled is kept as `trial_<column>` (`own_values` puts them back: the search-wide
effects and importances count each trial's own measurement once, and `analysis.repeats`
spreads a config's seeds by them). A trial whose batch grows on a schedule (AdaBatch every
`adabatch_interval` epochs) trained at a mix of batches set by how many epochs it ran: it
is pooled only with trials of the same settings that ran as many epochs; one whose batch
grows when its measured gradient noise says so (`adabatch_rule: noise_scale`) trained at a
mix its learning rate sets, and is pooled with none. Trials that ended without a speed of
their own (errors, memory, divergence: NaN is kept, and a diverged loss can change what a
step costs) take part in nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.load import CONFIG_PREFIX, setting_columns, settings_key
from trainables.metrics import STATUS_OK, STATUS_STOPPED_EARLY
from trainables.settings import SAME_WORK_PER_IMAGE
from trainables.speed import geometric_interval

# the trial's own timed speed, before pooling (`analysis.repeats` spreads repeats by it)
TRIAL_THROUGHPUT = "trial_throughput"
SAME_WORK_TRIALS = "same_work_trials"  # trials whose speeds the throughput pools
POOLED = ("throughput", "throughput_low", "throughput_high", "time_to_target_s")
OWN_PREFIX = "trial_"  # a pooled column's own value: trial_throughput, ...
POOLED_STATUSES = frozenset({STATUS_OK, STATUS_STOPPED_EARLY})  # trained as configured


def work_columns(frame: pd.DataFrame) -> list[str]:
    """The settings that decide a step's work: every setting but those of
    `SAME_WORK_PER_IMAGE`."""
    same = {f"{CONFIG_PREFIX}{key}" for key in SAME_WORK_PER_IMAGE}
    return [column for column in setting_columns(frame) if column not in same]


def _setting(frame: pd.DataFrame, key: str, default: object) -> pd.Series:
    column = frame.get(f"{CONFIG_PREFIX}{key}")
    if column is None:
        return pd.Series(default, index=frame.index)
    return column.where(column.notna(), default)


def _batch_growth(frame: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per trial, (whether its batch grows on a schedule, whether it grows by its measured
    noise scale)."""
    growth = pd.to_numeric(_setting(frame, "adabatch_growth", 1), errors="coerce").fillna(1)
    by_noise = _setting(frame, "adabatch_rule", "interval").astype(str) == "noise_scale"
    grows = growth != 1
    return grows & ~by_noise, grows & by_noise


def pool_same_work(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with one throughput per work (see the module docstring); unchanged where no
    two timed trials share a work."""
    if "throughput" not in frame or frame.empty:
        return frame
    speed = pd.to_numeric(frame["throughput"], errors="coerce")
    # results without a status (a frame built by hand) are trials that trained
    trained = frame["status"].isin(POOLED_STATUSES) if "status" in frame else True
    on_schedule, by_noise = _batch_growth(frame)
    timed = trained & (speed > 0) & np.isfinite(speed) & ~by_noise
    columns = work_columns(frame)
    if not columns or timed.sum() < 2:
        return frame
    keys = settings_key(frame, columns)
    epochs = frame["epoch"].map(repr) if "epoch" in frame else pd.Series("", index=frame.index)
    keys = keys.where(~on_schedule, keys + "|epochs=" + epochs)
    positions = pd.Series(np.arange(len(frame)), index=frame.index)  # labels may repeat
    groups = [group.to_numpy() for _, group in positions[timed].groupby(keys[timed])
              if len(group) > 1]  # fmt: skip
    if not groups:
        return frame
    pooled = frame.copy()
    for column in POOLED:
        if column in pooled:
            pooled[column] = pd.to_numeric(pooled[column], errors="coerce").astype(float)
            pooled[f"{OWN_PREFIX}{column}"] = pooled[column]
    pooled[SAME_WORK_TRIALS] = 1
    compiled = _compiled(frame).to_numpy()
    for rows in groups:
        _pool(pooled, rows, compiled)
    return pooled


def _compiled(frame: pd.DataFrame) -> pd.Series:
    """Per trial, whether torch.compile may have taken some of its time: compile_s above 0,
    or compile on where that metric is missing (a run logged before it)."""
    seconds = frame.get("compile_s")
    took = pd.to_numeric(seconds, errors="coerce").fillna(0.0) > 0 if seconds is not None \
        else pd.Series(False, index=frame.index)  # fmt: skip
    switched_on = _setting(frame, "compile", False).map(lambda v: str(v).lower() == "true")
    return took | switched_on


def _pool(frame: pd.DataFrame, rows: np.ndarray, compiled: np.ndarray) -> None:
    """Give the trials at positions `rows` their pooled speed, in place. `compiled`: per
    trial, whether torch.compile took some of its time to target (not all of it timed)."""
    own = frame[TRIAL_THROUGHPUT].to_numpy(dtype=float)[rows]
    speed = geometric_interval(own)[0]
    at = {"throughput": speed}
    for end, pick, figure in (("low", np.nanmin, own.min()), ("high", np.nanmax, own.max())):
        column = f"throughput_{end}"
        if column in frame:
            ends = frame[column].to_numpy(dtype=float)[rows]
            known = np.isfinite(ends).any()
            at[column] = (min if end == "low" else max)(float(pick(ends)), figure) if known \
                else figure  # fmt: skip
    for column, value in at.items():
        frame.iloc[rows, frame.columns.get_loc(column)] = value
    if "time_to_target_s" in frame:
        column = frame.columns.get_loc("time_to_target_s")
        to_target = frame["time_to_target_s"].to_numpy(dtype=float)[rows]
        scalable = np.isfinite(to_target) & ~compiled[rows]
        frame.iloc[rows[scalable], column] = to_target[scalable] * own[scalable] / speed
    frame.iloc[rows, frame.columns.get_loc(SAME_WORK_TRIALS)] = len(rows)


def own_values(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with each pooled column back at the trials' own values (`trial_<column>`)."""
    restored = {column: frame[f"{OWN_PREFIX}{column}"] for column in POOLED
                if f"{OWN_PREFIX}{column}" in frame}  # fmt: skip
    return frame.assign(**restored) if restored else frame


def pooled_note(frame: pd.DataFrame) -> str:
    """What a reader of the throughput column should know: how many of its rows that have a
    speed share it with rows of other settings (empty where none do). Rows are trials, or
    configs where seeds of one config were averaged (`analysis.repeats`: a `seeds` column)."""
    if SAME_WORK_TRIALS not in frame:
        return ""
    seeds = pd.to_numeric(frame["seeds"], errors="coerce").fillna(1) if "seeds" in frame else 1
    pooled = pd.to_numeric(frame[SAME_WORK_TRIALS], errors="coerce").fillna(1)
    shared = int((pooled > seeds).sum())
    if not shared:
        return ""
    rows = "configs" if "seeds" in frame else "trials"
    timed = int(pd.to_numeric(frame["throughput"], errors="coerce").notna().sum())
    return (
        f"{shared} of {timed} {rows} share a speed with others of the same work per image "
        "(they differ only in the learning rate, its warmup or the seed): the geometric mean "
        f"of their own timings ({TRIAL_THROUGHPUT} keeps each trial's)."
    )
