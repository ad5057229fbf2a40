"""`bench/alternation_rules.py`: simulated alternations read with a median's interval from
six and from nine rounds, run briefly here."""

import re

from tests.processes import bench_module, run_bench


def test_each_case_and_rule_prints_its_rounds_and_how_often_its_intervals_held():
    done = run_bench("alternation_rules.py", "--alternations", "60", "--spreads", "0.03",
                     "--jumps", "0", "0.1")  # fmt: skip
    lines = re.findall(r"^spread (\d+)%, jumps (\d+)%, median from (\d+) rounds: rounds mean "
                       r"([\d.]+), median ([\d.]+), intervals holding the true ratio "
                       r"([\d.]+)$", done.stdout, re.M)  # fmt: skip
    assert [(jumps, rule) for _, jumps, rule, *_ in lines] == [
        ("0", "6"), ("0", "9"), ("10", "6"), ("10", "9")]  # fmt: skip
    assert all(float(mean) >= 4 and 0 <= float(held) <= 1 for *_, mean, _, held in lines)


def test_t_until_nine_rounds_stops_no_later_than_a_median_from_six_at_the_same_coverage():
    """Where the rounds spread 5%, a median's interval from six rounds is their whole range
    until nine: Student's t reaches +-5 points sooner, and holds the true ratio as often."""
    bench = bench_module("alternation_rules")
    from_six = bench.simulate(6, 0.05, 0.0, alternations=400, precision=0.05, seed=3)
    from_nine = bench.simulate(9, 0.05, 0.0, alternations=400, precision=0.05, seed=3)
    assert from_nine[0] < from_six[0] - 1  # a round fewer on average, or more
    assert from_nine[2] >= from_six[2] - 0.02 and from_nine[2] >= 0.9
