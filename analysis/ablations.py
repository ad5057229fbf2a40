"""Each setting's effect from the search's ablations (`search.ablation`): pure functions of
the trials table, tested alone.

An ablation trial is its base trial's config with one setting changed (or none: a
noise-floor run on another seed). Its effect on a metric is its value less the mean of the
base config's runs (the base trial, its repeats and its noise-floor runs); the 95% interval
is the prediction interval of one run from the base runs' spread, t(k-1) * s * sqrt(1 +
1/k): what the change would have to beat to be told from the seed's noise. Accuracies and
gaps (fractions) change in points, their intervals cut where an accuracy would leave 0 to
1 (`points_within`); everything else (images/s, MiB, seconds) is a ratio to
the base's geometric mean, in percent, its interval taken on the logarithms (never below
-100%). The answer holds for this config, this model, this data and this device.

Two effects are not measured against the seeds' runs. A change of the learning rate, its
warmup or the seed (`trainables.settings.SAME_WORK_PER_IMAGE`) leaves a step's work as it
is: no effect on speed or memory, by construction. The throughput effect of any other
change is its trial's `speed_vs_baseline`, where it was timed against its base in
alternation (A B A B: the machine's drift on both sides), with that ratio's interval.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from analysis.flat import as_written
from analysis.load import CONFIG_PREFIX, setting_columns, settings_key
from analysis.same_work import OWN_PREFIX
from trainables.metrics import (
    ABLATION,
    ABLATION_OF,
    ASKED,
    NOISE_FLOOR,
    STATUS_OK,
    unit_of,
)
from trainables.settings import SAME_WORK_PER_IMAGE
from trainables.techniques import idle_settings

CONFIDENCE = 0.95
# Besides the objectives: what every large-batch technique is chosen or avoided for.
ALSO_MEASURED = ("peak_mem_mb", "time_to_target_s")
ABLATION_COLUMN = f"{CONFIG_PREFIX}{ABLATION}"
ABLATION_OF_COLUMN = f"{CONFIG_PREFIX}{ABLATION_OF}"
ASKED_COLUMN = f"{CONFIG_PREFIX}{ASKED}"
# What a pruned ablation says of its change: running out of memory is an effect.
ENDED = {
    "oom": "runs out of memory",
    "oom_predicted": "runs out of memory",
    "diverged": "diverges (loss not finite)",
    "compile_failed": "cannot be compiled",
    "error": "fails (an error)",
}


# What a step's work decides; a change that leaves it alone leaves these alone.
WORK_METRICS = ("throughput", "peak_mem_mb", "peak_reserved_mb")

BY_CONSTRUCTION = "none by construction (the same work per image)"


def inert_settings(metric: str, on_gpu: bool | None) -> dict[str, str]:
    """Setting -> why it cannot act on `metric` where the trials ran: the learning rate,
    its warmup and the seed on a speed or a memory (the same work per image), and a
    GPU-only technique on CPUs (`trainables.techniques.idle_settings`)."""
    inert = dict(idle_settings(on_gpu))
    if metric in WORK_METRICS:
        inert.update(dict.fromkeys(SAME_WORK_PER_IMAGE, BY_CONSTRUCTION))
    return inert


TIMED_IN_ALTERNATION = "speed_vs_baseline"  # the metric of a trial timed against its base
TOLD = ("raises", "lowers")  # the verdicts of an effect told from the noise
# The verdict's start for the accuracy metrics of an ablated run that ended below the min
# accuracy: a model at chance has no accuracy or gap to compare, and one run against three
# cannot say whether the change never learns or missed on this seed (its base's runs say
# how often the base learns).
LEARNED_NOTHING = "learned nothing"


def learned_nothing(verdict: object) -> bool:
    return isinstance(verdict, str) and verdict.startswith(LEARNED_NOTHING)


def effect_metrics(objectives: Sequence[str]) -> list[str]:
    """The objectives, then peak memory and time to target."""
    return list(dict.fromkeys([*objectives, *ALSO_MEASURED]))


def in_points(metric: str) -> bool:
    """Fractions (accuracies, gaps) change in points; the rest in percent of the base."""
    return unit_of(metric) == "fraction"


def points_within(low: float, high: float, base: float | None = None) -> tuple[float, float]:
    """An interval of a change in points cut to what fractions (accuracies, gaps: 0 to 1)
    allow: a change from `base` (a fraction) ends no lower than 0 and no higher than 1, so
    between -100 x base and 100 x (1 - base) points; a difference of two fractions (`base`
    None) between -100 and +100. A t interval on three runs of which one learned nothing
    read "+12.7 points [-79.0, +104.5]" around a mean of 0.75: an accuracy of 1.795
    (docs/RESULTS.md, section 63). NaN stays NaN."""
    lowest, highest = (-100.0, 100.0) if base is None else (-100.0 * base, 100.0 * (1 - base))
    return max(low, lowest), min(high, highest)


def split_ablations(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the search's trials, the ablation trials in the order they were planned) of one
    trials table (MLflow lists runs newest first): by their place among the ablations'
    suggestions (`asked`), or where they have none (ablations run before 2026-12-08, whose
    generator numbered its trial ids in order), by trial id."""
    if ABLATION_OF_COLUMN not in frame:
        return frame, frame.iloc[0:0]
    marked = frame[ABLATION_OF_COLUMN].map(lambda value: isinstance(value, str) and value != "")
    search, ablations = frame[~marked], frame[marked].sort_values("trial_id", kind="stable")
    if ASKED_COLUMN in ablations:  # those without a place after those with one
        place = pd.to_numeric(ablations[ASKED_COLUMN], errors="coerce")
        ablations = ablations.iloc[np.argsort(place.fillna(np.inf).to_numpy(), kind="stable")]
    # Columns only the ablations have (their notes, a seed the search left to its default)
    only_theirs = search.columns[search.isna().all() & ablations.notna().any()]
    return search.drop(columns=only_theirs), ablations


def base_runs(search: pd.DataFrame, ablations: pd.DataFrame, base: str) -> pd.DataFrame:
    """Every run of the base trial's config: the trial, its repeats (same settings, other
    seeds) and its noise-floor ablations; those that ended ok."""
    columns = setting_columns(search)  # the search's notes, the ablations' among them, left out
    chosen = search["trial_id"].astype(str) == base
    if not chosen.any():
        return search[chosen]
    settings = settings_key(search, columns)
    same = search[settings == settings[chosen].iloc[0]]
    floor = ablations[
        (ablations[ABLATION_OF_COLUMN] == base) & (ablations[ABLATION_COLUMN] == NOISE_FLOOR)
    ]
    runs = pd.concat([search[chosen], same[same["trial_id"].astype(str) != base], floor])
    return runs[runs["status"] == STATUS_OK]


def _change_text(label: str, base: pd.Series) -> tuple[str, str]:
    """(setting, `amp: false -> true`) of an ablation's label `amp=true`."""
    setting, _, value = label.partition("=")
    return setting, f"{setting}: {as_written(base.get(f'{CONFIG_PREFIX}{setting}'))} -> {value}"


def one_effect(ablated: float, base: np.ndarray, points: bool) -> tuple[float, float, float, str]:
    """(effect, low, high, verdict) of one ablated run against the base runs' values. An
    infinite value is a target never reached (time_to_target_s): no effect, and why.

    In points, the difference from the base mean and its prediction interval, cut to
    what a fraction can reach from that mean (`points_within`). Otherwise
    (images/s, MiB, seconds: positive amounts) a ratio: the same on the logarithms, then
    back to percent, so an interval can never claim that a change takes away more than all
    of a speed (never below -100%), and a halving and a doubling are the same size."""
    base = np.asarray(base, dtype=float)
    finite = base[np.isfinite(base)]
    if not len(base):
        return math.nan, math.nan, math.nan, "no base run ended ok"
    if len(finite) < len(base):
        why = "never reached" if not len(finite) else "not always reached"
        changed = "" if math.isfinite(ablated) else ", nor with the change"
        return math.nan, math.nan, math.nan, f"{why}{changed}"
    if not math.isfinite(ablated):
        return math.nan, math.nan, math.nan, "never reached with the change"
    if not points and (ablated <= 0 or (finite <= 0).any()):
        return math.nan, math.nan, math.nan, "not a positive amount: no ratio"
    values, changed = (finite, ablated) if points else (np.log(finite), math.log(ablated))
    difference = changed - float(values.mean())
    if len(values) < 2:
        low = high = math.nan
        verdict = "one base run: no interval"
    else:
        half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(values) - 1))
        half *= float(values.std(ddof=1)) * math.sqrt(1 + 1 / len(values))
        low, high = difference - half, difference + half
        if low <= 0 <= high:
            verdict = "no change" if difference == 0 and half == 0 else "not told from noise"
        else:
            verdict = "raises" if difference > 0 else "lowers"
    if points:
        low, high = points_within(low * 100, high * 100, float(values.mean()))
        return difference * 100, low, high, verdict
    effect, low, high = (100 * math.expm1(value) for value in (difference, low, high))
    return effect, low, high, verdict


def paired_effect(trial: pd.Series) -> tuple[float, float, float, str] | None:
    """(effect %, low, high, verdict) of a trial's speed timed against its base in
    alternation (`speed_vs_baseline` and its interval); None where it was not."""
    ratio, low, high = (
        float(pd.to_numeric(trial.get(f"{TIMED_IN_ALTERNATION}{end}"), errors="coerce"))
        for end in ("", "_low", "_high")
    )
    if not ratio > 0:
        return None
    if not (low > 0 and high > 0):
        return 100 * (ratio - 1), math.nan, math.nan, "one round: no interval"
    verdict = "not told from noise" if low <= 1 <= high else "raises" if low > 1 else "lowers"
    return 100 * (ratio - 1), 100 * (low - 1), 100 * (high - 1), verdict


def ablation_effects(
    search: pd.DataFrame,
    ablations: pd.DataFrame,
    metrics: Sequence[str],
    min_accuracy: float | None = None,
) -> pd.DataFrame:
    """One row per ablation and metric: `base`, `setting`, `change`, `status`, `metric`,
    `unit` (points or %), `effect`, `low`, `high`, `verdict`, `base_runs`, `measured`
    (against the seeds' runs, in alternation, or by construction), `base_accuracies` (the
    base runs' `best_val_acc`, the base trial's first: whether its config learns on every
    seed), `base_at_chance` (how many of them ended below `min_accuracy`: a config that
    learns on some seeds only) and `base_throughputs` (their own speeds: how far runs of one
    config, each in a process of its own, read apart, docs/RESULTS.md section 48). An
    ablated run whose
    `best_val_acc` ended below `min_accuracy` learned nothing: its metrics in points have no
    effect (NaN) and that verdict, not "within the noise" (three base runs' spread leaves
    even chance inside a 95% prediction interval)."""
    columns = ["base", "setting", "change", "status", "metric", "unit", "effect", "low",
               "high", "verdict", "base_runs", "measured", "base_accuracies",
               "base_at_chance", "base_throughputs"]  # fmt: skip
    rows = []
    changed = ablations[ablations[ABLATION_COLUMN] != NOISE_FLOOR] if len(ablations) else ablations
    for _, trial in changed.iterrows():
        base = str(trial[ABLATION_OF_COLUMN])
        runs = base_runs(search, ablations, base)
        first = search[search["trial_id"].astype(str) == base]
        setting, change = _change_text(
            str(trial[ABLATION_COLUMN]), first.iloc[0] if len(first) else pd.Series(dtype=object)
        )
        status = str(trial.get("status", STATUS_OK))
        paired = paired_effect(trial) if status == STATUS_OK else None
        accuracies, speeds = run_accuracies(runs), run_throughputs(runs)
        failed = runs_at_chance(runs, min_accuracy)
        reached = float(pd.to_numeric(trial.get("best_val_acc"), errors="coerce"))
        at_chance = min_accuracy is not None and reached < min_accuracy
        elsewhere = (
            learned_elsewhere(search, str(trial[ABLATION_COLUMN]), min_accuracy)
            if at_chance
            else ""
        )
        for metric in metrics:
            unit = _unit(metric)
            measured = "seeds"
            if status != STATUS_OK:
                effect = (math.nan, math.nan, math.nan, ENDED.get(status, status))
            elif at_chance and in_points(metric):
                why = (f"{LEARNED_NOTHING} (best_val_acc {reached:.4g}, below "
                       f"{min_accuracy:.3g}{elsewhere})")  # fmt: skip
                effect = (math.nan, math.nan, math.nan, why)
            elif setting in SAME_WORK_PER_IMAGE and metric in WORK_METRICS:
                effect, measured = (math.nan, math.nan, math.nan, BY_CONSTRUCTION), "construction"
            elif metric == "throughput" and paired is not None:
                effect, measured = paired, "alternation"
            else:
                ablated = float(pd.to_numeric(trial.get(metric), errors="coerce"))
                values = pd.to_numeric(runs.get(metric, pd.Series(dtype=float)), errors="coerce")
                effect = one_effect(ablated, values.to_numpy(dtype=float), in_points(metric))
            rows.append([base, setting, change, status, metric, unit, *effect, len(runs), measured,
                         accuracies, failed, speeds])  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def learned_elsewhere(search: pd.DataFrame, label: str, min_accuracy: float) -> str:
    """Where the search learned with an ablation's changed value (`label`: `optimizer=adam`):
    "; the search's most accurate trial with optimizer=adam, 2657fcb4, reached 0.8425 at lr
    0.0005805", its trial that ended ok with that value and the highest `best_val_acc`, at or
    above `min_accuracy`; empty where there is none. An ablation changes one setting, but
    whether a value learns depends on the others, the learning rate most (Adam at SGD's
    rate ends at chance): this says the value is not what failed."""
    setting, _, value = label.partition("=")
    column, rate = f"{CONFIG_PREFIX}{setting}", f"{CONFIG_PREFIX}lr"
    if column not in search or "best_val_acc" not in search or "status" not in search:
        return ""
    with_value = search[(search["status"] == STATUS_OK) & (search[column].map(as_written) == value)]
    accuracies = pd.to_numeric(with_value["best_val_acc"], errors="coerce")
    if accuracies.isna().all() or not accuracies.max() >= min_accuracy:
        return ""
    best = with_value.loc[accuracies.idxmax()]
    at_rate = f" at lr {as_written(best[rate])}" if rate in best.index and setting != "lr" else ""
    return (f"; the search's most accurate trial with {label}, {best['trial_id']}, reached "
            f"{accuracies.max():.4g}{at_rate}")  # fmt: skip


def run_accuracies(runs: pd.DataFrame) -> str:
    """The runs' `best_val_acc` as text ("0.81 / 0.5 / 0.5"), in their order; empty
    without the metric."""
    values = pd.to_numeric(runs.get("best_val_acc", pd.Series(dtype=float)), errors="coerce")
    return " / ".join(f"{value:.4g}" for value in values.dropna())


def runs_at_chance(runs: pd.DataFrame, min_accuracy: float | None) -> int:
    """How many of the runs ended with `best_val_acc` below `min_accuracy` (learned
    nothing); 0 without either."""
    if min_accuracy is None or "best_val_acc" not in runs:
        return 0
    return int((pd.to_numeric(runs["best_val_acc"], errors="coerce") < min_accuracy).sum())


def run_throughputs(runs: pd.DataFrame) -> str:
    """The runs' own `throughput` with its 95% interval as text ("4443 [4310, 4580] / 4401
    / 4097 [3990, 4200]", a run without one bare), in their order: a run's own figures
    (`trial_throughput`, `trial_throughput_low`, ...) where the search pooled its speed with
    others of the same work per image (`analysis.same_work`); empty without the metric.
    Each run is a process of its own, which moves a config's speed by a few percent
    (docs/RESULTS.md, section 58): the intervals say whether runs that read apart differ
    beyond what each measured."""

    def own(column: str) -> pd.Series:
        values = pd.to_numeric(runs.get(column, pd.Series(np.nan, index=runs.index)),
                               errors="coerce")  # fmt: skip
        pooled = f"{OWN_PREFIX}{column}"
        return pd.to_numeric(runs[pooled], errors="coerce").fillna(values) if pooled in runs \
            else values  # fmt: skip

    speeds, lows, highs = own("throughput"), own("throughput_low"), own("throughput_high")
    texts = []
    for speed, low, high in zip(speeds, lows, highs, strict=True):
        if not math.isnan(speed):
            bounds = f" [{low:.0f}, {high:.0f}]" if np.isfinite([low, high]).all() else ""
            texts.append(f"{speed:.0f}{bounds}")
    return " / ".join(texts)


def _unit(metric: str) -> str:
    return "points" if in_points(metric) else "%"


def _amount(value: float, unit: str) -> str:
    return f"{value:+.1f}{' points' if unit == 'points' else '%'}"


# An interval narrower than the one decimal it is written with: the base's runs and the
# change measured alike (the CPU's memory meter counts the same tensors on every seed), so
# "-26.5% (-26.5% to -26.5%)" would only repeat the effect.
EXACT = "the same in every run"


def _is_exact(row: pd.Series) -> bool:
    return round(row["low"], 1) == round(row["high"], 1) == round(row["effect"], 1)


def _spoken_interval(row: pd.Series) -> str:
    """An effect's interval as the answer's sentences write it: "(+6.9% to +15.4%)"."""
    if _is_exact(row):
        return f"({EXACT})"
    return f"({_amount(row['low'], row['unit'])} to {_amount(row['high'], row['unit'])})"


def _bracketed(row: pd.Series) -> str:
    """An effect as the table and the lines at a glance write it: "+9.6% [+6.7, +14.3]"."""
    if _is_exact(row):
        return f"{_amount(row['effect'], row['unit'])} ({EXACT})"
    return f"{_amount(row['effect'], row['unit'])} [{row['low']:+.1f}, {row['high']:+.1f}]"


def _verb(verdict: str, unit: str) -> str:
    if unit == "points":
        return "raised" if verdict == "raises" else "lowered"
    return "raised" if verdict == "raises" else "cut"


def sentence(rows: pd.DataFrame) -> str:
    """What one change did, in words: the effects told from noise with their intervals,
    then what stayed within the noise; or how the trial ended."""
    change = rows["change"].iloc[0]
    status = rows["status"].iloc[0]
    if status != STATUS_OK:
        return f"{change}: {rows['verdict'].iloc[0]}."
    told, within, same, unknown, same_work, not_learned = [], [], [], [], [], []
    for _, row in rows.iterrows():
        if row["verdict"] == BY_CONSTRUCTION:
            same_work.append(row["metric"])
        elif learned_nothing(row["verdict"]):
            not_learned.append(row)
        elif row["verdict"] in TOLD:
            told.append(
                f"{_verb(row['verdict'], row['unit'])} {row['metric']} by "
                f"{abs(row['effect']):.1f}{' points' if row['unit'] == 'points' else '%'} "
                f"{_spoken_interval(row)}"
            )
        elif row["verdict"] == "not told from noise":
            within.append(row["metric"])
        elif row["verdict"] == "no change":  # a zero interval around zero: the meter's
            same.append(row["metric"])
        else:
            unknown.append(f"{row['metric']}: {row['verdict']}")
    parts = []
    if not_learned:
        compared = ", ".join(row["metric"] for row in not_learned)
        parts.append(f"{not_learned[0]['verdict']} on its seed: {compared} not compared")
    if told:
        parts.append(", ".join(told))
    if within:
        parts.append(f"left {', '.join(within)} within the noise")
    if same:
        parts.append(f"left {', '.join(same)} unchanged ({EXACT})")
    if same_work:
        parts.append(f"{', '.join(same_work)}: none by construction (the same work per image)")
    if unknown:
        parts.append("; ".join(unknown))
    return f"{change}: {'; '.join(parts)}."


def answer(effects: pd.DataFrame, not_run: Mapping[str, str] | None = None) -> list[str]:
    """The report's first lines: for each ablated trial, what each change did."""
    lines = []
    for base, rows in effects.groupby("base", sort=False):
        runs = int(rows["base_runs"].max())
        paired = (rows["measured"] == "alternation").any() if "measured" in rows else False
        timing = "; speeds timed against it in alternation" if paired else ""
        # each run's accuracy: a config that learns on some seeds only shows it here
        accuracies = rows["base_accuracies"].iloc[0] if "base_accuracies" in rows else ""
        reached = (
            f", best_val_acc {accuracies}" if isinstance(accuracies, str) and accuracies else ""
        )
        speeds = rows["base_throughputs"].iloc[0] if "base_throughputs" in rows else ""
        if isinstance(speeds, str) and speeds:
            reached += f", throughput {speeds} images/s"
        lines.append(
            f"Around trial {base} ({runs} run{'s' if runs != 1 else ''} of its config give "
            f"the noise floor{reached}{timing}; {CONFIDENCE:.0%} intervals):"
        )
        failed = int(rows["base_at_chance"].max()) if "base_at_chance" in rows else 0
        if failed:
            lines.append(seed_fragile(failed, runs))
        lines += [sentence(group) for _, group in rows.groupby("change", sort=False)]
    for setting, why in (not_run or {}).items():
        lines.append(f"{setting}: not ablated, {why}.")
    return lines


def passed_over(
    search: pd.DataFrame, ablations: pd.DataFrame, min_accuracy: float | None
) -> list[str]:
    """The answer's lines for the trials whose noise floor ran and which were not ablated
    (`search.ablation.skip_seed_fragile`: a config that learned nothing on one of its seeds),
    in the order their floors ran."""
    if not len(ablations) or ABLATION_COLUMN not in ablations:
        return []
    floors = ablations[ablations[ABLATION_COLUMN] == NOISE_FLOOR]
    changed = set(ablations.loc[ablations[ABLATION_COLUMN] != NOISE_FLOOR, ABLATION_OF_COLUMN])
    lines = []
    for base in dict.fromkeys(floors[ABLATION_OF_COLUMN].astype(str)):
        if base in changed:
            continue
        runs = base_runs(search, ablations, base)
        failed = runs_at_chance(runs, min_accuracy)
        lines.append(
            f"Trial {base}, a front trial, was not ablated: its config learned nothing on "
            f"{failed} of its {len(runs)} runs (best_val_acc {run_accuracies(runs)}), it "
            "learns on some seeds only (search.ablation.skip_seed_fragile)."
        )
    return lines


def seed_fragile(failed: int, runs: int) -> str:
    """The answer's warning where some of the base config's runs learned nothing: the config
    depends on its seed (docs/RESULTS.md, section 33), so a spread that holds a model at
    chance is the floor every accuracy effect is read against."""
    return (
        f"Its config learned nothing on {failed} of its {runs} runs: it learns on some seeds "
        "only, and every accuracy effect below is read against runs that include "
        f"{'that failure' if failed == 1 else 'those failures'} (search.ablation.around=front "
        "with a larger search.ablation.max_trials ablates the next front trials too, each "
        "with a noise floor of its own)."
    )


def at_a_glance(effects: pd.DataFrame, objectives: Mapping[str, str]) -> list[str]:
    """A line per objective: the change that did the most for it beyond the noise, with its
    interval ("throughput: best raised by amp: false -> true, +30.1% [+25.0, +35.4]"), or
    that none did, and then the change that did it most harm, if one did beyond the noise
    (the base's value is then the better one)."""
    lines = []
    several = effects["base"].nunique() > 1
    for metric, direction in objectives.items():
        rows = effects[(effects["metric"] == metric) & effects["verdict"].isin(TOLD)]
        helps, harms = ("raises", "lowers") if direction == "max" else ("lowers", "raises")
        good, bad = rows[rows["verdict"] == helps], rows[rows["verdict"] == harms]
        better, worse = _verb(helps, _unit(metric)), _verb(harms, _unit(metric))
        if good.empty and bad.empty:
            lines.append(f"{metric}: no change {better} it beyond the noise.")
        elif good.empty:
            worst = bad.loc[(bad["effect"] if direction == "min" else -bad["effect"]).idxmax()]
            where = f" (around trial {worst['base']})" if several else ""
            lines.append(f"{metric}: no change {better} it beyond the noise; {worst['change']}"
                         f"{where} {worse} it most, {_bracketed(worst)}.")  # fmt: skip
        else:
            best = good.loc[(good["effect"] if direction == "max" else -good["effect"]).idxmax()]
            where = f" (around trial {best['base']})" if several else ""
            lines.append(f"{metric}: best {better} by {best['change']}{where}, {_bracketed(best)}.")
    return lines


def same_updates(ablations: pd.DataFrame) -> list[str]:
    """Notes on pairs of ablations of one base that train the same images in each update,
    only split differently between micro-batches (batch 32 -> 16 and accumulation 4 -> 2 both
    train 64 images a step, in the same order): their accuracy effects may be identical, and
    that is no bug; speed and memory tell them apart."""
    batch, steps = f"{CONFIG_PREFIX}batch_size", f"{CONFIG_PREFIX}accumulation_steps"
    if ablations.empty or batch not in ablations or steps not in ablations:
        return []
    split_only = {batch, steps, ABLATION_COLUMN}
    others = [c for c in setting_columns(ablations) if c not in split_only]
    notes = []
    changed = ablations[ablations[ABLATION_COLUMN] != NOISE_FLOOR]
    for base, trials in changed.groupby(ABLATION_OF_COLUMN, sort=False):
        rows = list(trials.iterrows())
        for (_, one), (_, other) in itertools.combinations(rows, 2):
            images = one[batch] * one[steps]
            if images != other[batch] * other[steps] or one[batch] == other[batch]:
                continue
            if any(repr(one[c]) != repr(other[c]) for c in others):
                continue
            notes.append(
                f"{one[ABLATION_COLUMN]} and {other[ABLATION_COLUMN]} (around trial {base}) "
                f"both train {as_written(images)} images an update, the same images in the "
                "same order split into other micro-batches: the same updates (but for batch "
                "norm's statistics), so alike accuracy effects are expected; speed and memory "
                "tell them apart."
            )
    return notes


def effect_table(effects: pd.DataFrame) -> pd.DataFrame:
    """One row per change, a column per metric: `+12.0% [+3.1, +20.9]`, or the verdict."""
    if effects.empty:
        return pd.DataFrame()
    cells = []
    for _, row in effects.iterrows():
        if math.isnan(row["effect"]):
            text = row["verdict"]
        elif math.isnan(row["low"]):
            text = f"{_amount(row['effect'], row['unit'])} ({row['verdict']})"
        else:
            text = _bracketed(row)
        cells.append(text)
    table = effects.assign(cell=cells).pivot_table(
        index=["base", "change"], columns="metric", values="cell", aggfunc="first", sort=False
    )
    order = list(dict.fromkeys(effects["metric"]))
    table = table[order].reset_index()
    table.columns.name = None
    return table.rename(columns={m: f"{m} ({'points' if in_points(m) else '%'})" for m in order})
