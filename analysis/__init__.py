"""Results of a search -> DataFrame -> Pareto front -> charts and report.

Imports nothing from `search`; works on any DataFrame with one row per trial, a
`status` column and the objective columns.
"""

from analysis.pareto import mark_front, pareto_ranks
from analysis.report import Report, write_report

__all__ = ["Report", "mark_front", "pareto_ranks", "write_report"]
