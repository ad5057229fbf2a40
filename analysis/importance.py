"""How much each sampled setting explains of each objective over the search's trials:
Optuna's fANOVA importance evaluator (a random forest's variance, split by setting), per
objective, over the feasible trials. It ranks settings; it measures no effect (the
ablations do: `analysis.ablations`), and on a small search it rests on few trials (the
report says how many). PED-ANOVA, Optuna's other evaluator, compares the top tenth of
the trials with the rest: on a search of 16 it is one trial, and it ranks a continuous
setting (the learning rate) first whatever it does."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import optuna
import pandas as pd

from analysis.load import CONFIG_PREFIX, as_numbers, spans_decades, varied_settings

MIN_TRIALS = 5  # fewer trials than that split no variance worth reporting


def distribution_of(column: pd.Series) -> optuna.distributions.BaseDistribution:
    """A setting's distribution as the trials show it: a range for real numbers that take
    many values (log where they span decades), else the values seen as categories."""
    numbers = as_numbers(column)
    if numbers is not None and numbers.nunique() > 5 and (numbers % 1 != 0).any():
        return optuna.distributions.FloatDistribution(
            float(numbers.min()), float(numbers.max()), log=spans_decades(numbers)
        )
    values = sorted({_plain(value) for value in column}, key=repr)
    return optuna.distributions.CategoricalDistribution(values)


def _plain(value: object) -> object:
    """A category as Optuna keeps it (None, bool, int, float or str)."""
    if isinstance(value, np.generic):
        value = value.item()
    return value if isinstance(value, bool | int | float | str) or value is None else str(value)


def setting_importances(
    frame: pd.DataFrame, objectives: Mapping[str, str], usable: np.ndarray
) -> tuple[pd.DataFrame, str]:
    """(a row per varied setting, a column per objective: its fANOVA importance, the
    columns summing to 1; what it rests on). Empty with the reason where too few trials."""
    trials = frame.loc[usable]
    settings = varied_settings(trials)
    if len(trials) < MIN_TRIALS or not settings:
        why = f"{len(trials)} usable trials" if settings else "no setting varies"
        return pd.DataFrame(), f"not estimated: {why} (fANOVA is given {MIN_TRIALS} or more)"
    distributions = {c.removeprefix(CONFIG_PREFIX): distribution_of(trials[c]) for c in settings}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per in-memory study
    try:
        columns = _importances(trials, objectives, distributions)
    finally:
        optuna.logging.set_verbosity(verbosity)
    if not columns:
        return pd.DataFrame(), "not estimated: too few trials with a value"
    table = pd.DataFrame(columns).reindex(list(distributions)).fillna(0.0)
    table.index.name = "setting"
    return table.reset_index(), f"fANOVA (Optuna) over {len(trials)} feasible trials"


def _importances(
    trials: pd.DataFrame,
    objectives: Mapping[str, str],
    distributions: Mapping[str, optuna.distributions.BaseDistribution],
) -> dict[str, dict[str, float]]:
    """Objective -> setting -> importance, for the objectives with enough trials."""
    columns: dict[str, dict[str, float]] = {}
    for objective, direction in objectives.items():
        values = pd.to_numeric(trials[objective], errors="coerce")
        known = trials[np.isfinite(values.to_numpy(dtype=float))]
        if len(known) < MIN_TRIALS:
            continue
        study = optuna.create_study(direction="maximize" if direction == "max" else "minimize")
        for _, row in known.iterrows():
            params = {name: _plain(row[f"{CONFIG_PREFIX}{name}"]) for name in distributions}
            study.add_trial(
                optuna.trial.create_trial(
                    params=params, distributions=distributions, value=float(row[objective])
                )
            )
        columns[objective] = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)
        )
    return columns
