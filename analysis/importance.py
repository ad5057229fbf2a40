"""How much each sampled setting explains of each objective over the search's trials:
Optuna's fANOVA importance evaluator (a random forest's variance, split by setting), per
objective, over the feasible trials. It ranks settings; it measures no effect (the
ablations do: `analysis.ablations`), and on a small search it rests on few trials (the
report says how many). PED-ANOVA, Optuna's other evaluator, compares the top tenth of
the trials with the rest: on a search of 16 it is one trial, and it ranks a continuous
setting (the learning rate) first whatever it does.

A setting that cannot act on an objective is no feature of that objective's forest (`inert`:
the learning rate, its warmup and the seed on a speed or a memory, where they do the same
work per image; a GPU-only technique on CPUs): the forest split the speeds' noise by them,
and gave the cuDNN autotuner a quarter of a CPU search's throughput (2026-12-07)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

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
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    usable: np.ndarray,
    inert: Callable[[str], Mapping[str, str]] = lambda objective: {},
) -> tuple[pd.DataFrame, str]:
    """(a row per varied setting, a column per objective: its fANOVA importance, the
    columns summing to 1, NaN where `inert(objective)` names the setting (setting -> why it
    cannot act); what it rests on, with the settings sampled but constant over the usable
    trials). Empty with the reason where too few trials."""
    trials = frame.loc[usable]
    settings = varied_settings(trials)
    if len(trials) < MIN_TRIALS or not settings:
        why = f"{len(trials)} usable trials" if settings else "no setting varies"
        return pd.DataFrame(), f"not estimated: {why} (fANOVA is given {MIN_TRIALS} or more)"
    distributions = {c.removeprefix(CONFIG_PREFIX): distribution_of(trials[c]) for c in settings}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per in-memory study
    try:
        columns = _importances(trials, objectives, distributions, inert)
    finally:
        optuna.logging.set_verbosity(verbosity)
    if not columns:
        return pd.DataFrame(), "not estimated: too few trials with a value"
    table = pd.DataFrame(columns).reindex(list(distributions))
    for objective in columns:
        acting = [name for name in distributions if name not in inert(objective)]
        table.loc[acting, objective] = table.loc[acting, objective].fillna(0.0)
    table.index.name = "setting"
    basis = f"fANOVA (Optuna) over {len(trials)} feasible trials"
    same = [c.removeprefix(CONFIG_PREFIX) for c in varied_settings(frame) if c not in settings]
    if same:
        basis += f"; {', '.join(same)} the same in all of them"
    flat = [name for name in objectives if name in trials and constant(trials[name])]
    if flat:
        basis += f"; {', '.join(flat)} the same in all of them, nothing to explain"
    return table.reset_index(), basis


def constant(values: pd.Series) -> bool:
    """One value over the trials that have one (fANOVA has no variance to split there)."""
    values = pd.to_numeric(values, errors="coerce")
    return values[np.isfinite(values.to_numpy(dtype=float))].nunique() == 1


def inert_reasons(table: pd.DataFrame, inert: Callable[[str], Mapping[str, str]]) -> list[str]:
    """What the "-" of an importance table stand for, one phrase per reason and the
    objectives it holds on: "lr, warmup_epochs on throughput, none by construction (...)"."""
    objectives = list(table.columns.drop("setting"))
    shown = set(table["setting"])
    where: dict[tuple[str, str], list[str]] = {}  # (setting, why) -> objectives
    for objective in objectives:
        for setting, why in inert(objective).items():
            if setting in shown:
                where.setdefault((setting, why), []).append(objective)
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}  # (why, objectives) -> settings
    for (setting, why), on in where.items():
        grouped.setdefault((why, tuple(on)), []).append(setting)
    phrases = []
    for (why, on), settings in grouped.items():
        scope = "every objective" if list(on) == objectives else ", ".join(on)
        phrases.append(f"{', '.join(sorted(settings))} on {scope}, {why}")
    return phrases


def _importances(
    trials: pd.DataFrame,
    objectives: Mapping[str, str],
    every: Mapping[str, optuna.distributions.BaseDistribution],
    inert: Callable[[str], Mapping[str, str]],
) -> dict[str, dict[str, float]]:
    """Objective -> setting -> importance, for the objectives with enough trials, each over
    the settings that can act on it."""
    columns: dict[str, dict[str, float]] = {}
    for objective, direction in objectives.items():
        values = pd.to_numeric(trials[objective], errors="coerce")
        known = trials[np.isfinite(values.to_numpy(dtype=float))]
        distributions = {k: v for k, v in every.items() if k not in inert(objective)}
        if len(known) < MIN_TRIALS or not distributions or constant(known[objective]):
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
