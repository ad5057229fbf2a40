"""A search overlaps its start and its end: Ray starts while the search's modules load and
the data is prepared; a Ray instance the search started is shut down while the report is
written, and one it found running is left running."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray

from search import execute, startup
from search.cli import RunOptions
from search.config import load_config
from search.run import main
from tests.conftest import CONFIGS, UNSCALED
from trainables.data import prepare_data

SMOKE = str(CONFIGS / "smoke.yaml")
SHORT = ["search.num_samples=2", "train.epochs=1", UNSCALED]


@pytest.mark.ray
def test_a_search_leaves_a_ray_instance_it_found_running(tmp_path, monkeypatch, ray_instance):
    monkeypatch.chdir(tmp_path)
    assert main(["--config", SMOKE, "--name", "found", *SHORT]) == 0
    assert ray.is_initialized()


@pytest.mark.ray
def test_a_search_that_started_ray_shuts_it_down_while_its_report_is_written(
    tmp_path, monkeypatch, ray_instance
):
    monkeypatch.chdir(tmp_path)
    config = load_config(SMOKE, SHORT)
    experiment_dir = Path(config.run.storage_path) / "owned"
    report = experiment_dir / "report" / "report.html"
    calls = []

    def shutdown() -> None:  # recorded instead: the session's instance serves other tests
        # the report is written meanwhile, or never: then this gives up after a minute
        deadline = time.monotonic() + 60
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        calls.append((threading.current_thread().name, report.exists()))

    monkeypatch.setattr(ray, "shutdown", shutdown)
    code = execute.run_search(
        config,
        experiment_dir,
        RunOptions(run_name="owned"),
        prepare_data(config.data),
        owns_ray=True,
    )
    assert code == 0
    assert calls == [("ray-shutdown", True)]  # on its own thread, done before returning


@pytest.mark.ray
def test_the_speed_references_start_timing_before_the_amp_probe_runs(
    tmp_path, monkeypatch, ray_instance
):
    """The task's worker imports torch for longer than the probe takes, so the probe
    runs while it does, not before it starts."""
    monkeypatch.chdir(tmp_path)
    calls = []
    timing, probing = startup.speed_scale.start, startup.machine_space

    def start_timing(*args, **kwargs):
        calls.append("speed references")
        return timing(*args, **kwargs)

    def probe(*args, **kwargs):
        calls.append("AMP probe")
        return probing(*args, **kwargs)

    monkeypatch.setattr(startup.speed_scale, "start", start_timing)
    monkeypatch.setattr(startup, "machine_space", probe)
    timed = ["search.num_samples=2", "train.epochs=1"]  # the speed scale as a search times it
    assert main(["--config", SMOKE, "--name", "ordered", "resources.gpu=auto", *timed]) == 0
    assert calls == ["speed references", "AMP probe"]


@pytest.mark.ray
@pytest.mark.parametrize(
    ("share", "message"),
    [
        ("resources.cpu=4", "resources.cpu: asks for 4 CPUs per trial, but the Ray cluster has 2"),
        ("resources.gpu=0.5", "resources.gpu: asks for 0.5 GPU per trial, but the Ray cluster"),
    ],
)
def test_a_share_the_cluster_cannot_give_is_refused_and_leaves_nothing_behind(
    share, message, tmp_path, monkeypatch, capsys, ray_instance
):
    # joined by address, so that the machine's own devices are not what refuses the GPU
    if "gpu" in share and ray.cluster_resources().get("GPU"):
        pytest.skip("the session's Ray instance has a GPU to give")
    monkeypatch.chdir(tmp_path)
    address = ray_instance.get_runtime_context().gcs_address
    code = main(["--config", SMOKE, "--address", address, share])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert ray.is_initialized()  # the session's instance, not this search's to end
    for thread in threading.enumerate():  # what was prepared meanwhile has finished
        if thread.name == "prepare":
            thread.join(timeout=120)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "ray_results").exists()


@pytest.mark.ray
def test_a_store_mlflow_cannot_open_is_refused_naming_the_key_and_is_left_as_it_was(
    tmp_path, monkeypatch, capsys, ray_instance
):
    # what the check before the start cannot see: a file there that is not a database
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "notes.db"
    store.write_text("not a database")
    code = main(["--config", SMOKE, "--tracking-uri", f"sqlite:///{store}", *SHORT])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "tracking.uri: MLflow cannot open the store at" in err
    assert "file is not a database" in err
    assert store.read_text() == "not a database"
    assert not (tmp_path / "ray_results").exists()
    assert ray.is_initialized()  # the session's instance, not this search's to end


def test_ctrl_c_before_any_trial_started_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(startup, "start", interrupted)
    assert main(["--config", SMOKE]) == 130
    err = capsys.readouterr().err
    assert "Stopped: interrupted before any trial started" in err and "Traceback" not in err


def test_sigterm_is_taken_as_ctrl_c_while_a_search_runs_and_left_as_it_was_after():
    sigint = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own Ctrl-C
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(KeyboardInterrupt), startup.sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs here, between two of Python's steps
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_ray_that_fails_to_start_leaves_no_thread_waiting_and_no_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def cannot_start(address):
        raise ConnectionError("the raylet died")

    monkeypatch.setattr(startup, "start_ray", cannot_start)
    config = load_config(SMOKE)
    with pytest.raises(ConnectionError):
        startup.start(config, tmp_path / "ray_results" / "x", RunOptions())
    preparing = [thread for thread in threading.enumerate() if thread.name == "prepare"]
    for thread in preparing:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in preparing)
    assert not (tmp_path / "mlflow.db").exists()


VISIBLE_CARDS_PROBE = """
import os, ray
from search.startup import start_ray
start_ray(None)

@ray.remote(num_cpus=1, num_gpus=0)
def visible_cards():
    return os.environ.get("CUDA_VISIBLE_DEVICES")

@ray.remote(num_cpus=1)
def started_with():
    # the environment the process was started with, as glibc read it
    with open("/proc/self/environ", "rb") as environ:
        return [item.decode() for item in environ.read().split(b"\\0")]

print("VISIBLE", repr(ray.get(visible_cards.remote())))
print("ARENAS", [item for item in ray.get(started_with.remote()) if "MALLOC_ARENA_MAX" in item])
ray.shutdown()
"""


@pytest.mark.slow
def test_a_task_in_a_ray_the_search_starts_sees_no_card_and_starts_with_one_malloc_arena(tmp_path):
    """As on a machine with a card: CUDA_VISIBLE_DEVICES=0 where Ray starts. glibc reads
    MALLOC_ARENA_MAX when the worker process starts (trainables.host_memory)."""
    from tests.processes import cli_env, ray_temp_dir

    with ray_temp_dir() as ray_tmp:
        env = cli_env(ray_tmp, CUDA_VISIBLE_DEVICES="0")
        finished = subprocess.run([sys.executable, "-c", VISIBLE_CARDS_PROBE], env=env,
                                  cwd=tmp_path, capture_output=True, text=True, timeout=180,
                                  check=False)  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "VISIBLE ''" in finished.stdout
    assert "ARENAS ['MALLOC_ARENA_MAX=1']" in finished.stdout


STARTS_ITS_OWN = """
import ray
from search.startup import start_ray
start_ray(None)
print("STARTED", ray.get_runtime_context().gcs_address)
ray.shutdown()
"""


@pytest.mark.slow
def test_without_an_address_the_search_starts_its_own_ray_where_a_dead_cluster_left_its_own():
    """A `ray start` or test cluster killed before it could clean up leaves its address in
    Ray's temp folder, where a bare `ray.init()` looks first: it then waits for that cluster
    for ever (on the lent H200, 2026-11-28, a search after a suite stopped at its limit)."""
    from tests.processes import cli_env, free_port, ray_temp_dir

    with ray_temp_dir() as ray_tmp:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{free_port()}")
        command = [sys.executable, "-c", STARTS_ITS_OWN]
        finished = subprocess.run(command, env=cli_env(ray_tmp), capture_output=True,
                                  text=True, timeout=120, check=False)  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "STARTED " in finished.stdout
