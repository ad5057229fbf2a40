"""Results of a search -> DataFrame -> Pareto front -> charts and report.

Imports nothing from `search`: it reads MLflow or a Ray Tune results folder into a frame
with one row per trial, and works on any such frame. The report and its command live in
`analysis.report` (`python -m analysis.report`), imported from there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported on first use: `analysis.flat` loads without MLflow or pandas.
_EXPORTS = {
    "frame_from_mlflow": "analysis.load",
    "frame_from_tune": "analysis.load",
    "hypervolume": "analysis.pareto",
    "mark_front": "analysis.pareto",
    "pareto_ranks": "analysis.pareto",
}
if TYPE_CHECKING:
    from analysis.load import frame_from_mlflow, frame_from_tune
    from analysis.pareto import hypervolume, mark_front, pareto_ranks

__all__ = [
    "frame_from_mlflow",
    "frame_from_tune",
    "hypervolume",
    "mark_front",
    "pareto_ranks",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
