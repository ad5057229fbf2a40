"""Nested config dicts as dotted keys: the one naming of settings in MLflow params, the
trials frame's `config.` columns and config comparisons; and a value as a config writes
it. Imports nothing heavy, so the search's CLI can use it before deciding to start
anything."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def flatten(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """{"data": {"seed": 0}} -> {"data.seed": 0}."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(name, value))
        else:
            flat[name] = value
    return flat


def as_written(value: Any) -> str:
    """A value as a config writes it: true, 0.0009183, adam, null (numpy scalars as
    Python's; a setting left unset reads back from a table as NaN: null too)."""
    if hasattr(value, "item") and not isinstance(value, str):  # a numpy scalar
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def as_shown(value: Any) -> str:
    """A value as the console's and the report's tables show it: four significant digits,
    "-" for a missing number, "never" for a target not reached (inf)."""
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if math.isinf(value):
            return "never" if value > 0 else "-inf"
        return f"{value:.4g}"
    return str(value)
