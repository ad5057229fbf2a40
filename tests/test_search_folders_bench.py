"""`python bench/search_folders.py`: figures read off finished searches' Tune folders, as
docs/RESULTS.md section 4 compares searches run apart."""

import json
import subprocess
import sys

from tests.conftest import REPO


def write_search(folder, trials):
    """Trial folders as Tune writes them: (id, start, end, epoch, status, accuracy, speed)."""
    for trial_id, start, end, epoch, status, accuracy, speed in trials:
        trial = folder / f"trial_{trial_id}"
        trial.mkdir(parents=True)
        (trial / "params.json").write_text(json.dumps({"batch_size": 32}))
        result = {"trial_id": trial_id, "timestamp": end, "time_total_s": end - start,
                  "epoch": epoch, "status": status, "best_val_acc": accuracy,
                  "throughput": speed, "gen_gap": 0.1}  # fmt: skip
        (trial / "result.json").write_text(json.dumps(result) + "\n")


def test_it_reads_span_stops_and_hypervolume_at_equal_trial_time(tmp_path):
    write_search(tmp_path / "with-stopping", [
        ("a", 100, 108, 8, "ok", 0.80, 2000.0),
        ("b", 100, 101, 1, "stopped_early", 0.50, 2500.0),
        ("c", 101, 110, 8, "ok", 0.70, 3000.0),
    ])  # fmt: skip
    write_search(tmp_path / "without", [
        ("x", 500, 508, 8, "ok", 0.80, 2000.0),  # ended 8 s in: inside the other's 10 s
        ("y", 500, 530, 8, "ok", 0.90, 3000.0),  # 30 s in: after
    ])  # fmt: skip
    finished = subprocess.run(
        [sys.executable, str(REPO / "bench" / "search_folders.py"), str(tmp_path / "with-stopping"),
         "--against", str(tmp_path / "without")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-2000:]
    lines = finished.stdout.splitlines()
    with_stopping = lines[2].split()
    assert with_stopping[:4] == ["with-stopping", "3", "10.0", "18.0"]  # trials, span, trial s
    assert "{1:" in lines[2] and "1}" in lines[2]  # one trial stopped at epoch 1
    without = lines[3].split()
    assert without[:4] == ["without", "2", "30.0", "38.0"] and without[-1] == "-"
    # At 10 s the search without stopping had x alone, which trial a equals and c beats:
    # the ratio is above 1.
    assert float(with_stopping[-1]) > 1.0


def test_it_groups_the_trials_that_ran_whole_by_a_setting(tmp_path):
    write_search(tmp_path / "search", [
        ("a", 100, 108, 8, "ok", 0.80, 2000.0),
        ("b", 100, 101, 1, "stopped_early", 0.50, 2500.0),  # not whole: left out
        ("c", 101, 110, 8, "ok", 0.52, 3000.0),  # at chance (below 0.55)
    ])  # fmt: skip
    for trial, augment in (("a", False), ("b", True), ("c", True)):
        params = tmp_path / "search" / f"trial_{trial}" / "params.json"
        params.write_text(json.dumps({"batch_size": 32, "augment": augment, "epochs": 8}))
    finished = subprocess.run(
        [sys.executable, str(REPO / "bench" / "search_folders.py"), str(tmp_path / "search"),
         "--by", "augment"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-2000:]
    lines = finished.stdout.splitlines()
    assert lines[2].split()[-2] == "1"  # the search's trials at chance: c
    groups = {line.split()[0]: [float(cell) for cell in line.split()[1:]] for line in lines[-2:]}
    # trials, median accuracy, gap, at chance, on the front
    assert groups["False"] == [1, 0.8, 0.1, 0, 1]
    assert groups["True"] == [1, 0.52, 0.1, 1, 0]
