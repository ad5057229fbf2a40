"""`bench/alternation_estimators.py`: A/A alternations read two ways, run briefly here."""

import math
import re

import pytest

from tests.processes import bench_module, run_bench


def test_each_block_length_gets_both_readings_whether_they_hold_one_and_a_summary():
    done = run_bench("alternation_estimators.py", "--batch-size", "4", "--blocks", "0.01",
                     "0.02", "--seconds", "0.3", "--repeats", "2")  # fmt: skip
    read_twice = (r"repeat (\d), blocks of ([\d.]+) s: (\d+) rounds, kurtosis (?:-?[\d.]+|nan), "
                  r"blocks' correlation (?:-?[\d.]+|nan); "
                  r"mean: \+-(?:[\d.]+|nan) points, holds 1: (yes|no|no interval); "
                  r"median: \+-(?:[\d.]+|nan) points, holds 1: (yes|no|no interval)")  # fmt: skip
    rounds = re.findall(read_twice, done.stdout)
    assert {(repeat, block) for repeat, block, *_ in rounds} == {
        ("1", "0.01"),
        ("1", "0.02"),
        ("2", "0.01"),
        ("2", "0.02"),
    }
    for _, _, count, by_mean, by_median in rounds:  # a median's interval needs six rounds
        assert int(count) >= 2 and by_mean != "no interval"
        assert (by_median == "no interval") == (int(count) < 6)
    summary = re.findall(
        r"blocks of ([\d.]+) s: half width, median / mean: ([\d.]+|nan)x .*intervals holding 1: "
        r"median (\d) of (\d), mean (\d) of (\d); a round's two blocks correlate at "
        r"(?:-?[\d.]+|nan) \(median\)",
        done.stdout,
    )
    assert [block for block, *_ in summary] == ["0.01", "0.02"]
    assert all(ratio == "nan" or float(ratio) > 0 for _, ratio, *_ in summary)  # nan: no median


def test_blocks_that_move_together_correlate_and_a_side_that_never_moves_has_none():
    bench = bench_module("alternation_estimators")
    assert bench.pairing([(1.0, 2.0), (2.0, 4.0), (1.5, 3.0)]) == pytest.approx(1.0)
    assert bench.pairing([(1.0, 2.0), (2.0, 1.0), (1.0, 2.0), (2.0, 1.0)]) == pytest.approx(-1.0)
    assert math.isnan(bench.pairing([(1.0, 2.0), (2.0, 2.0), (1.5, 2.0)]))
    assert math.isnan(bench.pairing([(1.0, 2.0), (2.0, 4.0)]))  # two rounds: no correlation
