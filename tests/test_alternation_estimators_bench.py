"""`bench/alternation_estimators.py`: A/A alternations read three ways, run briefly here."""

import math
import re

import pytest

from tests.processes import bench_module, run_bench


def test_each_block_length_gets_every_reading_whether_they_hold_one_and_a_summary():
    done = run_bench("alternation_estimators.py", "--batch-size", "4", "--blocks", "0.01",
                     "0.02", "--seconds", "0.3", "--repeats", "2")  # fmt: skip
    number, reading = r"(?:[\d.]+|nan)", r"(?:[\d.]+|nan) \+-(?:[\d.]+|nan) points, holds 1"
    holds = r"(yes|no interval|no)"
    read_three_ways = (
        rf"repeat (\d), blocks of ([\d.]+) s: (\d+) rounds, kurtosis -?{number}, "
        rf"blocks' correlation -?{number}, second block (?:[+-][\d.]+|nan)%; "
        rf"mean: {reading}: {holds}; median: {reading}: {holds}; pairs: {reading}: {holds}"
    )
    rounds = re.findall(read_three_ways, done.stdout)
    assert {(repeat, block) for repeat, block, *_ in rounds} == {
        ("1", "0.01"),
        ("1", "0.02"),
        ("2", "0.01"),
        ("2", "0.02"),
    }
    for _, _, count, by_mean, by_median, by_pairs in rounds:  # a median's: six rounds, or pairs
        assert int(count) >= 2 and by_mean != "no interval"
        assert (by_median == "no interval") == (int(count) < 6)
        assert (by_pairs == "no interval") == (int(count) < 12)
    summary = re.findall(
        r"blocks of ([\d.]+) s: half width, median / mean: ([\d.]+|nan)x .*, pairs "
        r"\+-(?:[\d.]+|nan); intervals holding 1: median (\d) of (\d), mean (\d) of (\d), "
        r"pairs (\d) of (\d); a round's second block (?:[+-][\d.]+|nan)% \(median\); a "
        r"round's two blocks correlate at (?:-?[\d.]+|nan) \(median\)",
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


def test_pairs_of_rounds_read_the_two_orders_as_one_ratio_that_the_slower_second_block_leaves():
    """Side 1 runs at half side 0's seconds; a round's second block 10% slower: the rounds
    alternate 0.5 x 1.1 and 0.5 / 1.1 in their ratio (side 0's seconds over side 1's)."""
    bench = bench_module("alternation_estimators")
    sums = [(1.0, 0.5 * 1.1) if i % 2 == 0 else (1.1, 0.5) for i in range(24)]
    ratio, low, high = bench.by_pairs([a / b for a, b in sums])
    assert ratio == pytest.approx(2.0) and low == pytest.approx(2.0) and high == pytest.approx(2.0)
    assert bench.second_block_slowing(sums) == pytest.approx(0.1)
    few = bench.by_pairs([a / b for a, b in sums[:11]])  # five pairs: no interval yet
    assert few[0] == pytest.approx(2.0) and math.isnan(few[1]) and math.isnan(few[2])
    assert math.isnan(bench.second_block_slowing(sums[:1]))
