"""`bench/ablation_cost.py`'s reading of its runs (the searches themselves are whole
commands, run as benches, not here)."""

import math

import pandas as pd
import pytest

from tests.processes import bench_module


def runs(case: str, parts: list[tuple[float, float, float]]) -> list[dict]:
    return [{"case": case, "search_s": search, "ablations_s": ablations, "rest_s": rest,
             "wall_s": search + (0.0 if math.isnan(ablations) else ablations) + rest}
            for search, ablations, rest in parts]  # fmt: skip


def test_each_part_changes_by_the_medians_the_rest_in_seconds():
    table = pd.DataFrame(runs("timed", [(40.0, 36.0, 15.0), (42.0, 35.0, 14.0), (90.0, 34.0, 9.0)])
                         + runs("untimed", [(40.0, 30.0, 12.0), (38.0, 28.0, 13.0),
                                            (39.0, 29.0, 11.0)]))  # fmt: skip
    changes = bench_module("ablation_cost").part_changes(table, "timed", "untimed")
    assert changes["search"] == pytest.approx(42.0 / 39.0)  # a run's outlier does not decide
    assert changes["ablations"] == pytest.approx(35.0 / 29.0)
    assert changes["rest"] == pytest.approx(14.0 - 12.0)


def test_a_case_without_ablations_has_no_ratio_for_them_and_says_so(capsys):
    bench = bench_module("ablation_cost")
    table = pd.DataFrame(
        runs("with", [(40.0, 30.0, 14.0)]) + runs("without", [(40.0, math.nan, 12.0)])
    )
    ratio = bench.print_ratio(table, "with", "without", aim=1.6)
    printed = capsys.readouterr().out
    assert "the search 1.00x, the ablations - (-: a case without), the rest +2.0 s" in printed
    assert ratio == pytest.approx(84.0 / 52.0)
    assert "wall time with / without: 1.62x (aim: at most 1.60x)" in printed
