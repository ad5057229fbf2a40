"""`bench/reference_tracking.py`: a config's speed against two references, window by window,
run briefly here."""

import re

import pytest

from tests.processes import run_bench

BRIEFLY = ("--windows", "2", "--seconds", "0.2", "--batch-size", "4", "--reference-batch", "2")


def test_each_window_reads_three_speeds_and_two_ratios_and_the_spreads_close_it():
    done = run_bench("reference_tracking.py", *BRIEFLY)
    windows = re.findall(
        r"window (\d): config (\d+) images/s, reference float32 (\d+) images/s, reference amp "
        r"(\d+) images/s, config / reference float32 ([\d.]+), config / reference amp ([\d.]+)",
        done.stdout,
    )
    assert [number for number, *_ in windows] == ["1", "2"]
    for _, config, reference, _, ratio, _ in windows:  # the ratio is the speeds'
        assert float(ratio) == pytest.approx(int(config) / int(reference), rel=0.01)
    spreads = dict(re.findall(r"(.+): largest / smallest window ([\d.]+)", done.stdout))
    assert set(spreads) == {"config", "reference float32", "reference amp",
                            "config / reference float32", "config / reference amp"}  # fmt: skip
    assert all(float(spread) >= 1.0 for spread in spreads.values())


def test_with_a_neighbour_every_other_window_runs_beside_one_and_the_end_compares_them():
    done = run_bench("reference_tracking.py", *BRIEFLY, "--neighbour")
    assert re.search(r"^window 1: ", done.stdout, re.M)
    assert re.search(r"^window 2 \(beside a neighbour\): ", done.stdout, re.M)
    compared = re.findall(
        r"^(.+): median alone ([\d.]+), beside a neighbour ([\d.]+), beside / alone ([\d.]+)",
        done.stdout, re.M,
    )  # fmt: skip
    assert {name for name, *_ in compared} >= {"config / reference float32",
                                               "config / reference amp"}  # fmt: skip
    for _, alone, near, ratio in compared:
        assert float(ratio) == pytest.approx(float(near) / float(alone), rel=0.01)


def test_the_neighbour_can_be_another_trials_kind_and_the_run_says_which():
    done = run_bench("reference_tracking.py", *BRIEFLY, "--neighbour", "--neighbour-batch", "3",
                     "--neighbour-amp", "--neighbour-channels-last")  # fmt: skip
    assert "neighbour: the small CNN at batch 3, bf16 autocast, channels-last\n" in done.stdout
    assert re.search(r"^window 2 \(beside a neighbour\): ", done.stdout, re.M)
