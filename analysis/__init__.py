"""Results of a search -> DataFrame -> Pareto front -> charts and report.

Imports nothing from `search`: it reads MLflow or a Ray Tune results folder into a frame
with one row per trial, and works on any such frame.
"""

from analysis.load import frame_from_mlflow, frame_from_tune
from analysis.pareto import hypervolume, mark_front, pareto_ranks
from analysis.report import Report, build_report, publish

__all__ = [
    "Report",
    "build_report",
    "frame_from_mlflow",
    "frame_from_tune",
    "hypervolume",
    "mark_front",
    "pareto_ranks",
    "publish",
]
