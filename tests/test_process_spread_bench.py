"""`bench/process_spread.py`: a config's speed over its references, one fresh process after
another, run briefly here."""

import re
import shutil
import subprocess
import sys

import pytest

from tests.processes import REPO, bench_module, run_bench

BRIEFLY = ("--processes", "2", "--seconds", "0.2", "--batch-size", "4",
           "--reference-batch", "2", "3")  # fmt: skip


def test_each_process_reads_the_config_and_its_ratios_and_the_end_gives_their_spreads():
    done = run_bench("process_spread.py", "--processes", "3", *BRIEFLY[2:])
    processes = re.findall(
        r"^process (\d): config (\d+) images/s, config / reference 2 ([\d.]+), "
        r"config / reference 3 ([\d.]+)$", done.stdout, re.M)  # fmt: skip
    assert [number for number, *_ in processes] == ["1", "2", "3"]
    spreads = dict(re.findall(r"^(.+): largest / smallest process ([\d.]+)$", done.stdout, re.M))
    assert set(spreads) == {"config", "config / reference 2", "config / reference 3"}
    speeds = [int(config) for _, config, *_ in processes]
    assert float(spreads["config"]) == pytest.approx(max(speeds) / min(speeds), rel=0.01)
    # with three processes, each column's relative spread and how often three agree
    assert re.search(r"^config / reference 2: sd of the logarithm [\d.]+%, threes of "
                     r"processes within 3% (0\.00|1\.00)$", done.stdout, re.M)  # fmt: skip


def test_threes_agree_where_their_largest_is_within_3_percent_of_their_smallest():
    spread = bench_module("process_spread")
    assert spread.threes_within([100.0, 101.0, 102.0, 110.0]) == 0.25  # only the first three
    assert spread.log_sd([100.0, 100.0, 100.0]) == 0.0


def test_with_an_environment_every_other_process_runs_with_it_and_the_end_compares_the_sets():
    done = run_bench("process_spread.py", *BRIEFLY, "--env", "THP_MEM_ALLOC_ENABLE=1")
    assert re.search(r"^process 1: ", done.stdout, re.M)
    assert re.search(r"^process 2 \(THP_MEM_ALLOC_ENABLE=1\): ", done.stdout, re.M)
    sets = re.findall(r"^(as it is|THP_MEM_ALLOC_ENABLE=1): config median ([\d.]+), spread 1.000",
                      done.stdout, re.M)  # fmt: skip
    assert [label for label, _ in sets] == ["as it is", "THP_MEM_ALLOC_ENABLE=1"]


def test_without_onednn_each_process_trains_on_torchs_own_kernels_and_says_so():
    done = run_bench("process_spread.py", *BRIEFLY, "--without-onednn")
    said = re.findall(r"^process (\d) \(torch's kernels, oneDNN off\): config \d+ images/s",
                      done.stdout, re.M)  # fmt: skip
    assert said == ["1", "2"]  # each child reported oneDNN off, else the bench stops


def test_an_environment_not_written_as_key_equals_value_is_refused():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "process_spread.py"),
                           "--env", "THP_MEM_ALLOC_ENABLE"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "--env takes KEY=VALUE, not 'THP_MEM_ALLOC_ENABLE'" in done.stderr


@pytest.mark.skipif(shutil.which("setarch") is None, reason="needs setarch (util-linux)")
def test_without_aslr_every_other_process_starts_unrandomised_and_the_end_compares_the_sets():
    done = run_bench("process_spread.py", *BRIEFLY, "--without-aslr")
    assert re.search(r"^process 1: ", done.stdout, re.M)
    assert re.search(r"^process 2 \(without ASLR\): ", done.stdout, re.M)
    sets = re.findall(r"^(as it is|without ASLR): config median", done.stdout, re.M)
    assert sets == ["as it is", "without ASLR"]


def test_without_aslr_and_an_environment_together_are_refused_for_both_take_every_other():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "process_spread.py"),
                           "--without-aslr", "--env", "A=1"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "give one" in done.stderr


def test_with_windows_and_moved_weights_each_process_reads_every_window_and_the_end_compares():
    done = run_bench("process_spread.py", "--processes", "2", "--seconds", "0.2", "--batch-size",
                     "4", "--reference-batch", "2", "--windows", "3", "--move-weights")  # fmt: skip
    windows = re.findall(r"^process (\d), its windows \(weights moved\): config / reference 2 "
                         r"[\d.]+; config / reference 2 [\d.]+; config / reference 2 [\d.]+$",
                         done.stdout, re.M)  # fmt: skip
    assert windows == ["1", "2"]
    assert re.search(r"^config / reference 2: sd of the logarithm across one process's windows "
                     r"[\d.]+%, across the processes' first windows [\d.]+%, across their "
                     r"medians [\d.]+% \([\d.]+% if the windows redraw it all\)$",
                     done.stdout, re.M)  # fmt: skip


def test_weights_moved_in_memory_keep_their_values_and_objects_at_new_addresses():
    import torch

    spread = bench_module("process_spread")
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    weight, before = model.weight, model.weight.detach().clone()
    addresses = [model.weight.data_ptr(), optimizer.state[weight]["exp_avg"].data_ptr()]
    kept = [model.weight.detach(), optimizer.state[weight]["exp_avg"]]  # the old stay allocated
    spread.move_weights(model, optimizer)
    assert model.weight is weight and torch.equal(model.weight, before)
    moved = [model.weight.data_ptr(), optimizer.state[weight]["exp_avg"].data_ptr()]
    assert all(new != old for new, old in zip(moved, addresses, strict=True)) and kept


def test_moving_weights_without_windows_to_move_them_between_is_refused():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "process_spread.py"),
                           "--move-weights"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "give --windows 2 or more" in done.stderr
