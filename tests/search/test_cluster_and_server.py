"""The same command on a Ray cluster and against an MLflow server, both real."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import ray
from mlflow.tracking import MlflowClient

from search.run import main
from tests.conftest import CONFIGS, UNSCALED
from tests.processes import cli_env, free_port, run_cli

pytestmark = pytest.mark.slow
SMOKE = str(CONFIGS / "smoke.yaml")


@pytest.fixture
def search_environment(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def two_node_cluster(ray_instance, monkeypatch):
    """A real Ray cluster of two nodes, one CPU each, on this machine, with token
    authentication as Ray's local instances have it. Said, not left to Ray: the first
    `ray.init` of a process (`ray_instance`'s, which also makes the token where there is
    none) sets RAY_AUTH_MODE=token and the process keeps that mode, while a test before this
    one had the variable taken away with the rest of its environment; a cluster started
    without it never ran a trial of a search joining it from this process (all four
    "cancelled before it started", 2026-12-06, after any search run in-process)."""
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    ray_instance.shutdown()  # the session's shared instance would be in the way
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_a_search_on_a_two_node_cluster_runs_trials_on_both_nodes(
    two_node_cluster, search_environment
):
    code = main(
        ["--config", SMOKE, "--name", "cluster", "--address", two_node_cluster.address, UNSCALED]
    )
    assert code == 0
    client = MlflowClient(f"sqlite:///{search_environment / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
    nodes = {run.data.tags["node"] for run in runs if "node" in run.data.tags}
    (worker,) = two_node_cluster.worker_nodes
    assert nodes == {two_node_cluster.head_node.node_id, worker.node_id}

    # A shell without RAY_AUTH_MODE=token (Ray turns it on by itself only for a cluster it
    # finds, never for an address it is given) is refused by the head: one message that
    # says what to set, after Ray's retries, where it was a traceback (2026-12-07).
    env = {k: v for k, v in cli_env().items() if k != "RAY_AUTH_MODE"}
    args = ["--config", SMOKE, "--name", "no-token", "--address", two_node_cluster.address]
    refused = run_cli(args, search_environment, env, timeout=180)
    assert refused.returncode == 2, refused.stderr[-3000:]
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith(f"error: could not join the Ray cluster at {two_node_cluster.address}")
    assert "run the search with RAY_AUTH_MODE=token and that token" in line
    assert "Traceback" not in refused.stderr
    assert not (search_environment / "ray_results" / "no-token").exists()


@pytest.fixture
def mlflow_server(tmp_path):
    """`mlflow server` on loopback, in its own process group so that its workers end too."""
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--workers", "1"]
    command += ["--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}"]
    command += ["--artifacts-destination", str(tmp_path / "artifacts")]
    server = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2):
                break
        except OSError:
            time.sleep(0.5)
    else:
        os.killpg(server.pid, signal.SIGKILL)
        pytest.fail("mlflow server did not start within 90 s")
    yield uri
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)


@pytest.mark.ray
def test_a_search_logs_to_a_real_mlflow_server(ray_instance, mlflow_server, search_environment):
    # two trials at once, one epoch each: what the server is sent, at the same time
    code = main(["--config", SMOKE, "--name", "served", "--tracking-uri", mlflow_server,
                 "search.num_samples=2", "train.epochs=1", UNSCALED])  # fmt: skip
    assert code == 0
    client = MlflowClient(mlflow_server)
    runs = client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and len(runs) == 3
    assert {r.info.status for r in runs} == {"FINISHED"}
    artifacts = {a.path for a in client.list_artifacts(parents[0].info.run_id, "report")}
    assert "report/report.html" in artifacts
    assert not (search_environment / "mlflow.db").exists()  # nothing went to the default


def test_an_unreachable_server_is_refused_within_seconds_before_anything_runs(
    search_environment, capsys
):
    started = time.monotonic()
    code = main(["--config", SMOKE, "--tracking-uri", f"http://127.0.0.1:{free_port()}"])
    assert code == 2 and time.monotonic() - started < 10
    assert "cannot reach the MLflow server" in capsys.readouterr().err
    assert not (search_environment / "ray_results").exists()
