"""`bench/trial_spread.py`: a config trained as a search's trial in fresh processes, its
speed's spread taken apart, run briefly here."""

import math
import re
import statistics
import subprocess
import sys

import pytest

from tests.processes import REPO, bench_module, run_bench

BRIEFLY = ("--processes", "6", "--no-neighbour", "epochs=3", "batch_size=16",
           "data.train_per_class=60", "data.val_per_class=20", "data.test_per_class=20",
           "train_eval_size=40")  # fmt: skip


def test_each_process_trains_the_trial_and_the_end_takes_its_speeds_spread_apart(tmp_path):
    """Six processes, every other one with an environment variable (`--env`): each half's
    spread taken apart, then read again from what it saved."""
    saved = tmp_path / "segments.json"
    done = run_bench("trial_spread.py", *BRIEFLY, "--env", "TRIAL_SPREAD_TEST=1",
                     "--save", str(saved))  # fmt: skip
    processes = re.findall(r"^process (\d)( \(--env\))?: (\d+) images/s \[(\d+), (\d+)\], "
                           r"(\d+) segments$", done.stdout, re.M)  # fmt: skip
    assert [(number, bool(env)) for number, env, *_ in processes] == [
        (str(n), n % 2 == 0) for n in range(1, 7)]  # fmt: skip
    assert all(int(low) <= int(speed) <= int(high) for *_, speed, low, high, _ in processes)
    assert all(int(segments) >= 3 for *_, segments in processes)  # each a spread of its own
    assert re.search(r"^with --env over without, the processes' median speeds: [\d.]+x$",
                     done.stdout, re.M)  # fmt: skip
    for half in ("without --env: ", "with --env: "):
        assert re.search(rf"^{half}within a trial \(median over the processes\): segment "
                         r"ratios sd [\d.]+%, reference blocks sd [\d.]+%, segment medians sd "
                         r"[\d.]+%, correlation -?[\d.]+$", done.stdout, re.M)  # fmt: skip
        readings = re.findall(rf"^{half}(.+): across processes sd ([\d.]+)%, threes of "
                              r"processes within 3% (0\.00|1\.00)$", done.stdout, re.M)  # fmt: skip
        assert [name for name, *_ in readings] == list(bench_module("trial_spread").READINGS)
        assert re.search(rf"^{half}a trial's reading, taken apart: its own segments [\d.]+%, "
                         r"the process's part [\d.]+%$", done.stdout, re.M)  # fmt: skip
        assert re.search(rf"^{half}a trial's 95% interval as it reads it: median half width "
                         r"[\d.]+%, holding the processes' median in [0-3] of 3$",
                         done.stdout, re.M)  # fmt: skip
    # read again from what it saved: the same figures, nothing trained
    again = run_bench("trial_spread.py", "--from", str(saved))
    assert "process 1" not in again.stdout
    assert again.stdout.splitlines()[-11:] == done.stdout.splitlines()[-11:]


def test_with_env_fewer_than_six_processes_are_refused():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "trial_spread.py"),
                           "--processes", "5", "--env", "A=1"], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "with --env, --processes is at least 6" in done.stderr


def test_the_two_readings_agree_on_steady_segments_and_a_reused_reference_counts_once():
    bench = bench_module("trial_spread")
    steady = [{"median": 200.0, "reference": 100.0, "reused": False}] * 4
    assert bench.as_a_trial_reads(steady) == bench.medians_over(steady) == 2.0
    # the last segment read over the block before it: the block weighs once among references
    segments = [{"median": 300.0, "reference": 100.0, "reused": False},
                {"median": 300.0, "reference": 150.0, "reused": False},
                {"median": 300.0, "reference": 150.0, "reused": True}]  # fmt: skip
    assert bench.medians_over(segments) == pytest.approx(300.0 / 125.0)
    assert bench.as_a_trial_reads(segments) == pytest.approx(2.0)


def test_a_segments_median_that_follows_its_reference_is_said_to_correlate():
    bench = bench_module("trial_spread")
    segments = [{"median": 2.0 * r, "reference": r, "reused": False} for r in (90.0, 100, 120)]
    within = bench.within_a_trial(segments)
    assert within["correlation"] == pytest.approx(1.0)
    assert within["segment ratios"] == pytest.approx(0.0, abs=1e-12)
    spread = statistics.stdev(math.log(r) for r in (90.0, 100, 120))
    assert within["reference blocks"] == pytest.approx(spread)
    assert within["segment medians"] == pytest.approx(spread)  # the same moves, doubled


def test_fewer_than_three_processes_are_refused():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "trial_spread.py"),
                           "--processes", "2"], capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 2 and "--processes is at least 3" in done.stderr


def test_a_trials_own_part_is_half_the_spread_of_its_halves_difference():
    bench = bench_module("trial_spread")

    def trial(odd: float, even: float) -> list[dict]:
        return [{"median": odd if i % 2 == 0 else even, "reference": 1.0, "reused": False}
                for i in range(6)]  # fmt: skip

    # halves that read alike in every trial: nothing of the spread is the trial's own
    assert bench.own_part([trial(100.0, 100.0), trial(120.0, 120.0), trial(90.0, 90.0)]) == 0
    differences = [math.log(110 / 100), math.log(100 / 110), 0.0]
    assert bench.own_part([trial(110.0, 100.0), trial(100.0, 110.0), trial(95.0, 95.0)]) == (
        pytest.approx(statistics.stdev(differences) / 2)
    )


def test_a_trial_too_short_for_a_spread_is_left_out_of_them_not_read_as_one():
    bench = bench_module("trial_spread")
    one = [{"median": 200.0, "reference": 100.0, "reused": False}]
    assert all(math.isnan(value) for value in bench.within_a_trial(one).values())
    steady = [{"median": 200.0 + i, "reference": 100.0, "reused": False} for i in range(4)]
    shifted = [{"median": 200.0 + 3 * i, "reference": 100.0, "reused": False} for i in range(4)]
    with_one = bench.own_part([steady, shifted, one])
    assert with_one == bench.own_part([steady, shifted]) and not math.isnan(with_one)
    assert math.isnan(bench.own_part([steady, one]))  # one trial: no spread across trials


def test_a_trial_of_several_configurations_is_read_as_a_trial_reads_it():
    """AdaBatch's batches: each configuration's median ratio, put together over the epochs
    each trained (the images), not one median over all of them."""
    bench = bench_module("trial_spread")

    def segment(key: str, epoch: int, ratio: float) -> dict:
        return {"median": ratio * 100.0, "reference": 100.0, "reused": False, "key": key,
                "epoch": epoch}  # fmt: skip

    segments = [segment("32x1", 0, 1.0), segment("32x1", 0, 1.0), segment("32x1", 1, 1.0),
                segment("64x1", 2, 2.0)]  # fmt: skip
    # two epochs at 1 and one at 2: three epochs' images in 2 + 0.5 reference seconds
    assert bench.as_a_trial_reads(segments) == pytest.approx(3 / 2.5)
    assert bench.medians_over(segments) == pytest.approx(3 / 2.5)


def test_a_stalled_reference_block_is_outvoted_by_its_neighbours():
    bench = bench_module("trial_spread")
    segments = [{"median": 200.0, "reference": reference, "reused": False}
                for reference in (100.0, 100.0, 50.0, 100.0, 100.0)]  # fmt: skip
    assert bench.over_nearest_references(segments) == pytest.approx(2.0)
    assert bench.over_last_references(segments) == pytest.approx(2.0)
    # read over its own block, the stalled one's segment reads double: the median holds
    assert bench.as_a_trial_reads(segments) == pytest.approx(2.0)
    steady_then_faster = [{"median": 200.0, "reference": r, "reused": False}
                          for r in (100.0, 100.0, 100.0, 125.0, 125.0, 125.0)]  # fmt: skip
    assert bench.over_nearest_references(steady_then_faster) == pytest.approx((2.0 + 1.6) / 2)
