"""The command users run: `python -m search.run --config ...`."""

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from search.run import main
from tests.conftest import CONFIGS, REPO, UNSCALED
from tests.processes import cli_env, importable, run_cli

SMOKE = CONFIGS / "smoke.yaml"


# A command's main that leaves behind what a search does: an object whose finaliser writes
# a file, an exit handler registered as it ran (Ray's, MLflow's), a logging handler's
# buffer, a print not yet flushed; then it returns a code or raises.
ENDING = """
import atexit, logging
from pathlib import Path
from search.cli import run_as_command


class Finalised:
    def __del__(self):
        Path("finalised").write_text("teardown ran")


def main():
    global kept
    kept = Finalised()
    atexit.register(lambda: Path("handler").write_text("handler ran"))
    logging.basicConfig(filename="log.txt")
    logging.warning("logged")
    print("printed", end="")
    {ending}


run_as_command(main)
"""


@pytest.mark.parametrize(
    ("ending", "code", "teardown"),
    [("return 3", 3, False), ('raise RuntimeError("main failed")', 1, True)],
)
def test_a_command_ends_after_its_exit_handlers_without_the_teardown_unless_main_raised(
    ending, code, teardown, tmp_path
):
    finished = subprocess.run([sys.executable, "-c", ENDING.format(ending=ending)],
                              cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
    assert finished.returncode == code
    assert finished.stdout == "printed"
    assert (tmp_path / "handler").read_text() == "handler ran"
    assert "logged" in (tmp_path / "log.txt").read_text()
    assert (tmp_path / "finalised").exists() == teardown


def test_a_config_with_three_mistakes_exits_2_naming_all_of_them_without_a_traceback(tmp_path):
    bad = yaml.safe_load(SMOKE.read_text())
    bad["train"]["batch_sise"] = 32
    bad["space"]["batch_size"] = {"choice": ["big", 64]}
    bad["train"]["lr"] = -0.1
    del bad["space"]["lr"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))

    finished = run_cli(["--config", str(path)], tmp_path, cli_env(), timeout=120)

    assert finished.returncode == 2
    assert "Traceback" not in finished.stderr + finished.stdout
    assert str(path) in finished.stderr
    for key in ("train.batch_sise", "space.batch_size.choice[0]", "train.lr"):
        assert key in finished.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "ray_results").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_share_on_a_machine_without_a_gpu_is_refused_before_anything_starts(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert main(["--config", str(SMOKE), "resources.gpu=0.5"]) == 2
    err = capsys.readouterr().err
    assert "resources.gpu: asks for 0.5 GPU per trial" in err and "resources.gpu=auto" in err
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("storage", ["a_file", "a_file/below"])
def test_a_storage_path_that_cannot_hold_folders_is_refused_before_anything_starts(
    storage, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a folder")
    assert main(["--config", str(SMOKE), "--storage-path", storage]) == 2
    err = capsys.readouterr().err
    assert "run.storage_path: must be a folder" in err and "Traceback" not in err
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("mlflwo://127.0.0.1:5000", "tracking.uri: MLflow keeps no runs at mlflwo:// URIs"),
        ("sqlite:///a_file/mlflow.db", "tracking.uri: cannot make the SQLite database"),
    ],
)
def test_a_tracking_store_that_cannot_be_had_is_refused_before_anything_starts(
    uri, message, nothing_runs, tmp_path, capsys
):
    (tmp_path / "a_file").write_text("not a folder")
    assert main(["--config", str(SMOKE), "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert message in err and str(SMOKE) in err and "Traceback" not in err
    assert err.rstrip().endswith("(set on the command line)")  # not in the file: the flag
    assert not nothing_runs and sorted(tmp_path.iterdir()) == [tmp_path / "a_file"]


def test_an_unreachable_cluster_is_refused_within_seconds_before_anything_starts(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    assert main(["--config", str(SMOKE), "--address", f"127.0.0.1:{port}"]) == 2
    assert time.monotonic() - started < 10
    assert "cannot reach the Ray cluster at 127.0.0.1:" in capsys.readouterr().err
    assert main(["--config", str(SMOKE), "--address", "head-node"]) == 2
    assert "is not HOST:PORT" in capsys.readouterr().err
    assert main(["--config", str(SMOKE), "--address", "http://127.0.0.1:8265"]) == 2
    assert "is a web address; a search joins the cluster at" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "ray_results").exists()


def test_the_resume_command_printed_is_the_command_that_started_the_search_quoted():
    """Pasted into a shell it parses to the same config, flags and overrides (a resumed
    search keeps its config), with the search's name and --resume."""
    import shlex

    from search.cli import parse_args, resume_command

    started = ["--config", "my cfg ü/smoke.yaml", "--storage-path", "/tmp/a b", "--name", "x",
               "--num-samples", "2", "search.ablation={seeds: 1}", "train.epochs=1"]  # fmt: skip
    printed = resume_command(started, "smoke-20261206-193556")
    words = shlex.split(printed)
    assert words[:3] == ["python", "-m", "search.run"]
    resumed = parse_args(words[3:])
    assert resumed.resume and resumed.name == "smoke-20261206-193556"
    assert (resumed.config, resumed.storage_path, resumed.num_samples) == (
        "my cfg ü/smoke.yaml", "/tmp/a b", 2)  # fmt: skip
    assert resumed.overrides == ["search.ablation={seeds: 1}", "train.epochs=1"]


def test_the_helps_example_is_a_command_that_loads(capsys, monkeypatch):
    """`--help`'s example is the first command a new user copies: its config and overrides
    load as written (an example whose epochs left a shipped rung behind was refused)."""
    import shlex

    from search.cli import parse_args
    from search.config import load_config

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    example = help_text.split("Example: ", 1)[1]
    words = shlex.split(example)
    assert words[:3] == ["python", "-m", "search.run"]
    monkeypatch.chdir(REPO)
    given = parse_args(words[3:])
    config = load_config(given.config, given.overrides)
    assert config.name == "cats_dogs"


def test_overrides_may_come_before_between_and_after_the_flags():
    """A second run of overrides after a flag was refused as unrecognized arguments."""
    from search.cli import parse_args

    given = parse_args(["train.epochs=5", "--config", "c.yaml", "train.lr=0.01",
                        "--num-samples", "2", "search.seed=1"])  # fmt: skip
    assert (given.config, given.num_samples) == ("c.yaml", 2)
    assert given.overrides == ["train.epochs=5", "train.lr=0.01", "search.seed=1"]


def test_resume_with_nothing_to_resume_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--config", str(SMOKE), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


@pytest.mark.ray
def test_images_that_cannot_be_had_are_one_message_and_no_mlflow_run(
    tmp_path, capsys, monkeypatch, ray_instance
):
    # the images are prepared while Ray starts: their error still ends the search at once
    # (class folders are checked before: these two hold files that are no images)
    monkeypatch.chdir(tmp_path)
    for name in ("cats", "dogs"):
        (tmp_path / "photos" / name).mkdir(parents=True)
        (tmp_path / "photos" / name / "notes.txt").write_text("not a photo")
    code = main(["--config", str(SMOKE), "data.source=image_folder", "data.root=photos"])
    err = capsys.readouterr().err
    assert code == 2 and "data:" in err and "could be decoded" in err and "Traceback" not in err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "ray_results").exists()
    assert ray_instance.is_initialized()  # not this search's to shut down


@pytest.mark.slow
def test_the_smoke_search_runs_end_to_end_and_mlflow_holds_a_parent_with_nested_trials(tmp_path):
    # Each sampled config twice, with seeds 0 and 1: the report averages them.
    finished = run_cli(
        ["--config", str(SMOKE), "--name", "smoke-e2e", "search.repeats=2"], tmp_path, cli_env()
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "Results:" in finished.stdout and "rank" in finished.stdout
    # The progress table is the project's (search.progress), not Tune's grid with its loc.
    assert re.search(r"^== \d+ s: \d+ of \d+ trials ended; ", finished.stdout, re.MULTILINE)
    assert "| loc" not in finished.stdout and "Trial name" not in finished.stdout

    config = yaml.safe_load(SMOKE.read_text())
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("smoke")
    closing = finished.stdout.splitlines()[-3:]  # how to review, at the end, not scrolled away
    assert (
        closing[-2] == f"Review:  mlflow ui --backend-store-uri sqlite:///{tmp_path / 'mlflow.db'}"
    )
    runs_page = f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs"
    assert closing[-1] == (
        f"Runs:    {runs_page}?workflowType=machine_learning&viewStateShareKey=smoke-e2e"
    )
    view = json.loads(experiment.tags["mlflow.sharedViewState.smoke-e2e"])  # opened by the link
    assert json.loads(view["state"])["selectedColumns"] == [
        "metrics.`throughput`", "metrics.`best_val_acc`", "metrics.`gen_gap`",
        "tags.`is_pareto`", "tags.`status`", "tags.`status_detail`",
    ]  # fmt: skip
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    (parent,) = parents
    assert parent.info.run_name == "smoke-e2e" and parent.info.status == "FINISHED"
    results = Path(parent.data.tags["results_dir"])  # where `analysis.report` writes too
    assert results.name == "smoke-e2e" and (results / "report" / "report.html").exists()
    assert parent.data.params["search.num_samples"] == str(config["search"]["num_samples"])
    data, classes = config["data"], 2  # the images each accuracy is scored on, for the knee
    assert {key: value for key, value in parent.data.tags.items()
            if key.startswith("split_images.")} == {
        "split_images.val": str(data["val_per_class"] * classes),
        "split_images.test": str(data["test_per_class"] * classes),
        "split_images.train_eval": str(config["train"]["train_eval_size"]),
    }  # fmt: skip
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/trials.csv", "report/pareto_front.png"} <= artifacts

    assert len(children) == config["search"]["num_samples"]
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED" and child.data.tags["status"] == "ok"
        assert {"batch_size", "optimizer", "lr", "epochs"} <= set(child.data.params)
        history = client.get_metric_history(child.info.run_id, "val_acc")
        assert [m.step for m in history] == list(range(1, config["train"]["epochs"] + 1))
        assert "training_iteration" not in child.data.metrics
        assert child.info.run_name.startswith(f"bs{child.data.params['batch_size']}-")
        # what it ran on: the card (here the CPU) and the versions that drove it
        assert child.data.tags["torch_version"] == str(torch.__version__)
        assert child.data.tags["device_name"].startswith("cpu (")
        assert {"driver_version", "cuda_version", "cudnn_version"} <= set(child.data.tags)
    assert {c.data.params["optimizer"] for c in children} == {"sgd", "adam"}  # the grid ran

    assert sorted(c.data.params["seed"] for c in children) == ["0", "0", "1", "1"]
    report = pd.read_csv(tmp_path / "ray_results" / "smoke-e2e" / "report" / "trials.csv")
    assert report["seeds"].tolist() == [2, 2]  # one row per config, its two seeds averaged
    assert {"throughput_std", "best_val_acc_std", "gen_gap_std"} <= set(report.columns)
    front = client.search_runs([experiment.experiment_id], "tags.is_pareto = 'true'")
    assert front and all(run.data.tags["status"] == "ok" for run in front)


@pytest.mark.slow
def test_the_guides_own_model_example_is_searched_with_checkpointing_of_its_blocks(tmp_path):
    guide = (REPO / "docs" / "GUIDE.md").read_text()
    section = guide.split("## Your own model", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my_models.py").write_text(example)
    env = cli_env(PYTHONPATH=importable(tmp_path))
    finished = run_cli(
        ["--config", str(SMOKE), "--name", "own-model", "train.model=my_models:build",
         "train.activation_checkpointing=true", "train.epochs=2", "search.num_samples=2",
         UNSCALED],
        tmp_path, env,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = pd.read_csv(tmp_path / "ray_results" / "own-model" / "report" / "trials.csv")
    assert len(report) == 2 and (report["status"] == "ok").all()
    assert (report["config.model"] == "my_models:build").all()
