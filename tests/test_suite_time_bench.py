"""`bench/suite_time.py`: the suite on one process against two workers, alternated, run
here on one small test file."""

import re

from tests.processes import run_bench


def test_the_runs_alternate_and_the_end_gives_each_sides_median_and_the_rounds_ratio():
    done = run_bench("suite_time.py", "--rounds", "1",
                     "--pytest-args", "tests/analysis/test_pareto.py")  # fmt: skip
    runs = re.findall(r"^(one process|2 workers): (\d+) s, CPU busy (\d+)%, exit 0, (\d+) passed",
                      done.stdout, re.M)  # fmt: skip
    assert [label for label, *_ in runs] == ["one process", "2 workers"]
    assert runs[0][3] == runs[1][3]  # the same tests both ways
    assert re.search(r"^2 workers / one process: median [\d.]+ over 1 rounds \([\d.]+\)$",
                     done.stdout, re.M)  # fmt: skip


def test_a_run_that_fails_is_printed_and_kept_out_of_the_medians():
    done = run_bench("suite_time.py", "--rounds", "1",
                     "--pytest-args", "tests/analysis/test_pareto.py -k no_such_test")  # fmt: skip
    assert re.search(r"^one process: \d+ s, CPU busy \d+%, exit 5, ", done.stdout, re.M)
    assert "median" not in done.stdout
