"""Long searches meet killed processes: nothing may be lost, nothing left RUNNING."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient

from search import execute
from search.ablation import floor_key
from search.ablation_run import saved_order
from search.recovery import Outcome, fit_with_recovery, is_host_memory_kill
from search.run import main
from tests.conftest import CONFIGS, UNSCALED
from tests.processes import (
    cli_env,
    importable,
    processes_with_env,
    ray_temp_dir,
    reported_epochs,
    run_cli,
    start_cli,
    wait_for,
)
from trainables.classifier import fit_classifier
from trainables.data import prepare_data
from trainables.metrics import MACHINE_METRICS, METRICS, NOISE_FLOOR
from trainables.settings import TrainSettings

pytestmark = pytest.mark.slow
SMOKE = str(CONFIGS / "smoke.yaml")


def mlflow_client(workdir: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")


def trial_runs(workdir: Path) -> list:
    client = mlflow_client(workdir)
    experiment = client.get_experiment_by_name("smoke")
    if experiment is None:
        return []
    return [
        run
        for run in client.search_runs([experiment.experiment_id])
        if "mlflow.parentRunId" in run.data.tags
    ]


def epochs_logged(workdir: Path) -> list[int]:
    client = mlflow_client(workdir)
    return [len(client.get_metric_history(r.info.run_id, "epoch")) for r in trial_runs(workdir)]


def finished_trial_ids(workdir: Path) -> set[str]:
    runs = trial_runs(workdir)
    return {run.data.tags["trial_id"] for run in runs if run.info.status == "FINISHED"}


def test_a_trial_killed_mid_epoch_resumes_from_its_checkpoint_and_ends_as_if_never_stopped(
    tmp_path,
):
    # The speed scale kept (no UNSCALED): its reference blocks keep epochs 3-4 long enough
    # for the kill below to land in them.
    args = [
        "--config", SMOKE, "--name", "killed-trial", "--num-samples", "1",
        "space.batch_size={choice: [32]}", "space.optimizer={choice: [adam]}",
        "space.lr={choice: [0.001]}", "train.epochs=4", "data.train_per_class=400",
    ]  # fmt: skip
    with ray_temp_dir() as ray_tmp:
        env = cli_env(ray_tmp)
        search = start_cli(args, tmp_path, env)
        wait_for(lambda: any(n >= 2 for n in epochs_logged(tmp_path)), 180, "epoch 2")
        (worker,) = processes_with_env("RAY_TMPDIR", str(ray_tmp), name="ImplicitFunc")
        os.kill(worker, signal.SIGKILL)  # mid-epoch 3
        _, err = search.communicate(timeout=240)
    assert search.returncode == 0, err[-3000:]

    (run,) = trial_runs(tmp_path)  # the same child run, continued
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "ok"
    history = mlflow_client(tmp_path).get_metric_history(run.info.run_id, "epoch")
    assert sorted(m.step for m in history) == [1, 2, 3, 4]

    trial_dir = next((tmp_path / "ray_results" / "killed-trial").glob("trial_*"))
    last = json.loads((trial_dir / "result.json").read_text().splitlines()[-1])
    assert last["pid"] != worker  # finished by a new process
    config = json.loads((trial_dir / "params.json").read_text())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the trial did: same arithmetic, same numbers
    try:
        settings = TrainSettings.from_config(config)
        straight = fit_classifier(settings, prepare_data(settings.data), lambda m, c: None)
    finally:
        torch.set_num_threads(threads)
    for name in set(METRICS) - MACHINE_METRICS - {"status_detail"}:
        assert last[name] == pytest.approx(straight[name], nan_ok=True), name
    # Tune keeps the killed attempt's error.txt; the report reads how the trial ended
    report = pd.read_csv(tmp_path / "ray_results" / "killed-trial" / "report" / "trials.csv")
    assert list(report["status"]) == ["ok"] and list(report["pareto_rank"]) == [0]


def test_a_killed_driver_resumed_finishes_without_rerunning_or_duplicating_anything(tmp_path):
    args = ["--config", SMOKE, "--name", "killed-driver", "--num-samples", "6",
            "search.max_concurrent_trials=1", "search.sampler=tpe", UNSCALED]  # fmt: skip
    with ray_temp_dir() as ray_tmp:
        search = start_cli(args, tmp_path, cli_env(ray_tmp))
        # Wait for the runs to be closed, not for their last epoch: a run logs epoch 3 a moment
        # before it is marked FINISHED, and a kill in between leaves one trial fewer finished.
        wait_for(lambda: len(finished_trial_ids(tmp_path)) >= 2, 180, "2 finished trials")
        os.killpg(search.pid, signal.SIGKILL)  # the driver and everything in its group
        search.wait()
    assert len(finished_trial_ids(tmp_path)) >= 2

    with ray_temp_dir() as ray_tmp:
        resumed = run_cli([*args, "--resume"], tmp_path, cli_env(ray_tmp))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming killed-driver" in resumed.stdout

    runs = trial_runs(tmp_path)
    trial_ids = [run.data.tags["trial_id"] for run in runs]
    finished = [run for run in runs if run.data.tags.get("status") == "ok"]
    assert len(finished) == 6 and len(set(trial_ids)) == len(trial_ids)  # none duplicated
    assert all(run.info.status in ("FINISHED", "FAILED") for run in runs)  # none RUNNING
    client = mlflow_client(tmp_path)
    for run in finished:  # no trial ran twice: one value per epoch
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "epoch")]
        assert sorted(steps) == [1, 2, 3], run.data.tags["trial_id"]
    (parent,) = [
        r
        for r in client.search_runs([runs[0].info.experiment_id])
        if "mlflow.parentRunId" not in r.data.tags
    ]
    assert parent.info.status == "FINISHED"

    study = optuna.load_study(
        study_name="killed-driver",
        storage=f"sqlite:///{tmp_path / 'ray_results' / 'killed-driver' / 'optuna.db'}",
    )
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 6  # the study continued where it stopped
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]


def test_ctrl_c_stops_with_the_resume_command_and_leaves_no_run_running(tmp_path):
    args = ["--config", SMOKE, "--name", "ctrl-c", "--num-samples", "4", "train.epochs=6",
            "search.max_concurrent_trials=1", UNSCALED]  # fmt: skip
    with ray_temp_dir() as ray_tmp:
        search = start_cli(args, tmp_path, cli_env(ray_tmp))
        wait_for(lambda: any(n >= 2 for n in epochs_logged(tmp_path)), 180, "a trial's epoch 2")
        os.killpg(search.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
        _, err = search.communicate(timeout=120)
    assert search.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    resume = (f"python -m search.run --config {SMOKE} --num-samples 4 --name ctrl-c --resume "
              f"train.epochs=6 search.max_concurrent_trials=1 {UNSCALED}")  # fmt: skip
    assert f"To continue where it stopped: {resume}\n" in err
    runs = trial_runs(tmp_path)
    assert runs and all(run.info.status in ("FINISHED", "FAILED") for run in runs)
    assert {"interrupted"} <= {run.data.tags.get("status") for run in runs}


def test_ablations_interrupted_while_a_floor_runs_resume_and_end_with_what_it_decided(tmp_path):
    # one trial at a time: the first ablation trial is the knee's first floor run
    args = ["--config", SMOKE, "--name", "floor", "--num-samples", "2", "train.epochs=6",
            "search.max_concurrent_trials=1", "search.ablation={seeds: 2}", UNSCALED]  # fmt: skip
    ablations = tmp_path / "ray_results" / "floor" / "ablations"
    with ray_temp_dir() as ray_tmp:
        search = start_cli(args, tmp_path, cli_env(ray_tmp))
        wait_for(lambda: any(reported_epochs(d) >= 2 for d in ablations.glob("trial_*")), 300,
                 "the first floor run's epoch 2")  # fmt: skip
        os.killpg(search.pid, signal.SIGINT)
        _, err = search.communicate(timeout=120)
        assert search.returncode == 130, err[-3000:]
        resumed = run_cli([*args[:4], "--resume", *args[4:]], tmp_path, cli_env(ray_tmp), 400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # two floor runs and a change of each of the three settings, around the knee
    assert "Ablations: resuming 5 ablation trials around trial " in resumed.stdout
    ran = [json.loads(d.joinpath("params.json").read_text()) for d in ablations.glob("trial_*")]
    floors = {floor_key(point): None for point in ran if point["ablation"] == NOISE_FLOOR}
    for trial in ablations.glob("trial_*"):
        point, last = json.loads((trial / "params.json").read_text()), None
        for line in (trial / "result.json").read_text().splitlines():
            last = json.loads(line)
        if point["ablation"] == NOISE_FLOOR and last is not None:
            floors[floor_key(point)] = last["best_val_acc"]
    decided, final = saved_order(tmp_path / "ray_results" / "floor").decided(floors)
    assert final and len(ran) == len(decided)  # each decided trial once, no more
    assert sorted(point["asked"] for point in ran) == list(range(len(ran)))


def test_resuming_with_a_changed_config_names_the_keys_that_differ(tmp_path, capsys, monkeypatch):
    experiment = tmp_path / "ray_results" / "smoke-x"
    experiment.mkdir(parents=True)
    (experiment / "tuner.pkl").write_bytes(b"")
    (experiment / "experiment_state-1.json").write_text("{}")
    state = {"parent_run_id": "r", "tracking_uri": "u", "experiment": "smoke", "config": {
        "name": "smoke", "train": {"epochs": 9}}}  # fmt: skip
    (experiment / "search_state.json").write_text(json.dumps(state))
    monkeypatch.chdir(tmp_path)
    assert main(["--config", SMOKE, "--name", "smoke-x", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "train.epochs: is 3 but smoke-x started with 9" in err


class HostMemoryKill(RuntimeError):
    """What Tuner.fit raises in Ray 2.60 when its memory monitor kills a trial's worker."""


@pytest.mark.ray
def test_a_fit_interrupted_before_any_trial_reported_is_interrupted_not_finished(
    ray_instance, tmp_path
):
    """Ctrl-C once every planned trial has started and none has reported: Tune's clean-up
    marks them all TERMINATED, so their statuses would read as a finished search."""
    from ray import tune

    def waits(config):
        (tmp_path / f"started-{config['x']}").touch()
        time.sleep(120)

    def tuner() -> tune.Tuner:
        return tune.Tuner(
            tune.with_resources(waits, {"cpu": 1}),
            param_space={"x": tune.grid_search([1, 2])},
            run_config=tune.RunConfig(storage_path=str(tmp_path), name="waits", verbose=0),
        )

    def interrupt_once_both_started() -> None:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("started-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGUSR1)  # Tune's stop signal besides Ctrl-C's SIGINT

    threading.Thread(target=interrupt_once_both_started, daemon=True).start()
    sigint = signal.getsignal(signal.SIGINT)
    result = fit_with_recovery(tuner, tuner, expected_trials=2, automatic_resumes=0,
                               say=print)  # fmt: skip
    assert result.outcome is Outcome.INTERRUPTED
    assert result.detail == "0 of 2 trials finished"
    assert signal.getsignal(signal.SIGINT) is sigint  # Tune's handler does not outlive the fit


def test_a_memory_monitor_kill_is_recognised_even_wrapped():
    wrapped = RuntimeError(
        "Caught unexpected exception: 2 worker(s) were killed due to the node running low on "
        "memory. Memory on the node (IP: 127.0.0.1) was 1.66GB used / 23.54GB limit"
    )
    assert is_host_memory_kill(wrapped)
    import ray.exceptions

    try:
        try:
            raise ray.exceptions.OutOfMemoryError("killed")
        except ray.exceptions.OutOfMemoryError as cause:
            raise RuntimeError("fit failed") from cause
    except RuntimeError as error:
        assert is_host_memory_kill(error)
    assert not is_host_memory_kill(RuntimeError("Trial raised ValueError"))


@pytest.mark.ray
def test_the_search_resumes_by_itself_after_the_memory_monitor_aborts_a_fit(
    ray_instance, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    real_fit, calls = execute.fit_with_recovery, []

    def first_fit_killed(first_tuner, restored_tuner, **kwargs):
        def killed_after_a_trial():
            tuner = first_tuner()
            calls.append("first")
            tuner.fit()  # runs the whole search; then pretend the monitor struck
            raise HostMemoryKill("1 worker(s) were killed due to the node running low on memory")

        return real_fit(killed_after_a_trial, restored_tuner, **kwargs)

    monkeypatch.setattr(execute, "fit_with_recovery", first_fit_killed)
    code = main(["--config", SMOKE, "--name", "monitor", "--num-samples", "2", UNSCALED])
    assert code == 0 and calls == ["first"]
    runs = [r for r in trial_runs(tmp_path)]
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}


@pytest.mark.ray
def test_a_search_the_memory_monitor_keeps_killing_stops_with_the_exact_resume_command(
    ray_instance, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)

    real_fit = execute.fit_with_recovery

    def always_killed(first_tuner, restored_tuner, **kwargs):
        def killed():
            first_tuner()  # builds the experiment, so that it can be resumed
            raise HostMemoryKill("1 worker(s) were killed due to the node running low on memory")

        return real_fit(killed, killed, **kwargs)

    monkeypatch.setattr(execute, "fit_with_recovery", always_killed)
    code = main(["--config", SMOKE, "--name", "doomed", "--num-samples", "2", UNSCALED])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    printed = f"python -m search.run --config {SMOKE} --num-samples 2 --name doomed --resume "
    assert printed + UNSCALED in err  # as it was started: a resumed search keeps its config
    client = mlflow_client(tmp_path)
    runs = client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
    assert runs and all(run.info.status == "FAILED" for run in runs)


@pytest.mark.ray
@pytest.mark.parametrize("stop", [OSError("No space left on device"), KeyboardInterrupt()])
def test_a_report_that_fails_or_is_interrupted_leaves_the_search_run_failed_not_running(
    stop, ray_instance, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)

    def report_stops(*args, **kwargs):
        raise stop

    monkeypatch.setattr(execute, "report_and_finish", report_stops)
    args = ["--config", SMOKE, "--name", "reportless", "--num-samples", "2", "train.epochs=1",
            UNSCALED]  # fmt: skip
    if isinstance(stop, KeyboardInterrupt):  # Ctrl-C: said, and continuing writes it
        assert main(args) == 130
        assert (
            "Stopped: interrupted while the report was written; the trials are done, and "
            "continuing writes it: python -m search.run --config"
        ) in capsys.readouterr().err
    else:
        with pytest.raises(OSError, match="No space left"):
            main(args)
    client = mlflow_client(tmp_path)
    runs = client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
    (parent,) = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    assert parent.info.status == "FAILED"
    assert {run.info.status for run in runs if run is not parent} == {"FINISHED"}


BROKEN_MODEL = """
import torch
from torch import nn


class _BrokenBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("this model's backward is broken")


class Broken(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.head = nn.Linear(3, num_classes)

    def forward(self, x):
        return _BrokenBackward.apply(self.head(x.mean(dim=(2, 3))))


def build(*, num_classes, image_size):
    return Broken(num_classes)
"""


def test_a_search_whose_every_trial_raises_exits_1_saying_so_with_its_run_failed(tmp_path):
    """The model passes the config's check (a forward) and raises in every trial's first
    backward: the search still writes its report, and says that nothing trained."""
    (tmp_path / "broken_models.py").write_text(BROKEN_MODEL)
    env = cli_env(PYTHONPATH=importable(tmp_path))
    done = run_cli(
        ["--config", SMOKE, "--name", "broken", "train.model=broken_models:build",
         "search.num_samples=2", "train.epochs=1", "run.max_failures=0", UNSCALED],
        tmp_path, env,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "No trial trained: of the search's trials all 2 raised." in done.stderr
    assert "this model's backward is broken" in done.stderr  # Ray's error, as it printed it
    assert (tmp_path / "ray_results" / "broken" / "report" / "report.html").exists()
    client = mlflow_client(tmp_path)
    runs = client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
    (parent,) = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    assert parent.info.status == "FAILED"
