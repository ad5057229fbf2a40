"""`bench/suite_time.py`: the suite on one process against two workers, alternated, run
here on one small test file; its summary keeps failing runs out."""

import importlib.util
import re
import sys

from tests.conftest import REPO
from tests.processes import run_bench

spec = importlib.util.spec_from_file_location("suite_time_bench", REPO / "bench" / "suite_time.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench
spec.loader.exec_module(bench)


def test_the_runs_alternate_and_the_end_gives_each_sides_median_and_the_rounds_ratio():
    done = run_bench("suite_time.py", "--rounds", "1",
                     "--pytest-args", "tests/analysis/test_pareto.py")  # fmt: skip
    runs = re.findall(r"^(one process|2 workers): (\d+) s, CPU busy (\d+)%, exit 0, (\d+) passed",
                      done.stdout, re.M)  # fmt: skip
    assert [label for label, *_ in runs] == ["one process", "2 workers"]
    assert runs[0][3] == runs[1][3]  # the same tests both ways
    assert re.search(r"^2 workers / one process: median [\d.]+ over 1 rounds \([\d.]+\)$",
                     done.stdout, re.M)  # fmt: skip


def test_a_run_that_fails_is_kept_out_of_its_sides_median_and_of_the_ratios():
    timed = [("one", 100.0, 0), ("two", 60.0, 0), ("one", 120.0, 1), ("two", 80.0, 0)]
    runs = [bench.SuiteRun(label, seconds, None, code, "") for label, seconds, code in timed]
    assert bench.summary(runs, "one", "two") == [
        "one: median 100 s over 1 passing runs",
        "two: median 70 s over 2 passing runs",
        "two / one: median 0.60 over 1 rounds (0.60)",
    ]
