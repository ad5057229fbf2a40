"""`bench/knee_stability.py`: each finished search's knee read again by the front's range and on
evidence, and how often runs agree, from folders and MLflow runs written here."""

import subprocess
import sys

import pandas as pd
from mlflow.tracking import MlflowClient

from analysis.report import split_size_tags
from search.experiment import SearchState
from tests.conftest import REPO
from tests.processes import cli_env, run_bench

SPACE = {"batch_size": "{choice: [32, 128]}", "lr": "{loguniform: [1.0e-3, 1.0e-2]}"}
SPLITS = {"val": 400, "test": 400, "train_eval": 400}  # 200 images a class, two classes


def trial(trial_id: str, batch: int, lr: float, speed: float, accuracy: float, gap: float):
    return {"trial_id": trial_id, "config.batch_size": batch, "config.lr": lr,
            "throughput": speed, "throughput_low": 0.95 * speed,
            "throughput_high": 1.05 * speed, "best_val_acc": accuracy, "gen_gap": gap,
            "status": "ok", "is_pareto": True}  # fmt: skip


def finished_search(folder, tracking_uri: str, trials: list[dict], splits=SPLITS) -> None:
    """A search's results folder as the search leaves it: its state (config, MLflow parent
    run, whose tags say the splits' sizes) and its report's table."""
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("knees") or client.get_experiment(
        client.create_experiment("knees"))  # fmt: skip
    tags = {"num_classes": "2", **split_size_tags(splits)}
    parent = client.create_run(experiment.experiment_id, tags=tags)
    objectives = {"throughput": "max", "best_val_acc": "max", "gen_gap": "min"}
    config = {"search": {"objectives": objectives}, "space": SPACE}
    SearchState(parent.info.run_id, tracking_uri, "knees", config=config).save(folder)
    (folder / "report").mkdir(parents=True)
    pd.DataFrame(trials).to_csv(folder / "report" / "trials.csv", index=False)


def test_runs_whose_fronts_differ_by_a_gap_within_its_noise_agree_on_the_knee_on_evidence(
    tmp_path,
):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # Run 1's fastest trial is nearest the ideal only by a gap 0.04 below the others' (a
    # gap's noise on 400 and 400 images is 0.098); run 2's front lacks that trial
    finished_search(tmp_path / "run1", uri, [
        trial("fast0001", 128, 0.004, 6000.0, 0.78, 0.08),
        trial("midd0001", 32, 0.0028, 4500.0, 0.84, 0.12),
        trial("slow0001", 32, 0.0006, 3000.0, 0.845, 0.11),
    ])  # fmt: skip
    finished_search(tmp_path / "run2", uri, [
        trial("midd0002", 32, 0.0028, 4500.0, 0.84, 0.12),
        trial("slow0002", 32, 0.0006, 3000.0, 0.845, 0.11),
    ])  # fmt: skip

    done = run_bench("knee_stability.py", "--from", str(tmp_path / "run1"), str(tmp_path / "run2"))

    assert f"{tmp_path / 'run1'}: knee by range: fast0001 (batch_size=128, lr=0.004)" in done.stdout
    assert f"{tmp_path / 'run1'}: knee on evidence: midd0001 (batch_size=32, lr=0.0028)" in (
        done.stdout)  # fmt: skip
    assert f"{tmp_path / 'run2'}: knee on evidence: midd0002 (batch_size=32, lr=0.0028)" in (
        done.stdout)  # fmt: skip
    assert "by range: 2 distinct knee configs in 2 runs, the most common in 1; 0 of 1 pairs" in (
        done.stdout)  # fmt: skip
    assert "on evidence: 1 distinct knee configs in 2 runs, the most common in 2; 1 of 1 pairs" in (
        done.stdout)  # fmt: skip


def test_a_folder_that_is_not_a_finished_search_is_named(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "bench" / "knee_stability.py"), "--from",
                           str(tmp_path)], capture_output=True, text=True, env=cli_env(),
                          check=False)  # fmt: skip
    assert done.returncode == 2
    assert f"{tmp_path} holds no report/trials.csv" in done.stderr


def test_a_search_whose_run_does_not_say_its_splits_sizes_is_named(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    finished_search(tmp_path / "old", uri, [trial("midd0001", 32, 0.0028, 4500.0, 0.84, 0.12)],
                    splits={})  # fmt: skip
    done = subprocess.run([sys.executable, str(REPO / "bench" / "knee_stability.py"), "--from",
                           str(tmp_path / "old")], capture_output=True, text=True, env=cli_env(),
                          check=False)  # fmt: skip
    assert done.returncode == 1
    assert f"{tmp_path / 'old'}: its MLflow parent run does not say the splits' sizes" in (
        done.stderr)  # fmt: skip
