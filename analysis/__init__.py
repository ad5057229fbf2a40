"""Results of a search -> DataFrame -> Pareto front -> charts and report.

Imports nothing from `search`: it reads MLflow or a Ray Tune results folder into a frame
with one row per trial, and works on any such frame. The report and its command live in
`analysis.report` (`python -m analysis.report`), imported from there.
"""

from analysis.load import frame_from_mlflow, frame_from_tune
from analysis.pareto import hypervolume, mark_front, pareto_ranks

__all__ = [
    "frame_from_mlflow",
    "frame_from_tune",
    "hypervolume",
    "mark_front",
    "pareto_ranks",
]
