"""A search's start, overlapped: Ray starts while, on a thread, the search's own modules
load and the images and MLflow's store are made ready; then `search.execute` runs it.

Starting Ray is mostly waiting for its own processes (2.5 s on 2 cores), and loading
MLflow, Optuna, Tune and the report's libraries takes about as long (2.6 s once torch is
in): done one after the other they were a tenth of the default search.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

import ray

from search import speed_scale
from search.background import in_background
from search.cli import EXIT_USAGE, RunOptions, handler_put_back, say
from search.cluster import ClusterUnavailable, join_refused
from search.config import ConfigError, SearchConfig
from search.console import plan
from search.devices import machine_space, resolve_gpu
from search.errors import Problem
from trainables.host_memory import WORKER_ENV

if TYPE_CHECKING:
    from trainables import PreparedData

REFUSED_WAIT_S = 30.0  # for the thread to end after a refusal, so it is not cut mid-write


def start(config: SearchConfig, experiment_dir: Path, options: RunOptions) -> int:
    """Run the search of a valid config: Ray started (or joined) and its resources checked,
    the data ready, then `search.execute.run_search`. A Ray instance this started is shut
    down at the end; one already running in this process (a notebook's, a test's) is left
    running. A refusal leaves nothing behind: MLflow's store is opened only once the
    cluster has been accepted. Once Ray is up, SIGTERM stops the search as Ctrl-C does
    (`sigterm_as_interrupt`), until this returns."""
    with contextlib.ExitStack() as until_the_end:
        return started(config, experiment_dir, options, until_the_end)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (`kill`, a scheduler ending a job, `docker stop`) taken as Ctrl-C: Tune saves
    its state and the search says how to continue, instead of Ray's handler for its driver
    printing a native stack trace and aborting (exit 134). Set once Ray is up (its start
    sets that handler), from the main thread only (where Python runs signal handlers); the
    handler before is put back after."""
    with handler_put_back(signal.SIGTERM) as settable:
        if settable:
            signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
        yield


def started(
    config: SearchConfig,
    experiment_dir: Path,
    options: RunOptions,
    until_the_end: contextlib.ExitStack,
) -> int:
    """`start`'s body; `until_the_end` holds what is undone when the search returns."""
    planned = config.resources.gpu != "auto"  # else said once Ray has counted the cards
    if planned:
        config = machine_space(config, options, experiment_dir)
        say(plan(config, experiment_dir, options.resume))
    accepted: Future[bool] = Future()  # whether the cluster can run the trials
    preparing = in_background(lambda: load_and_prepare(config, accepted), name="prepare")
    owns_ray = not ray.is_initialized()
    try:
        start_ray(options.address)
        until_the_end.enter_context(sigterm_as_interrupt())
        config = resolve_gpu(config, options)
        check_cluster_resources(config)
        # Timed on a trial's CPU while the data loads and, here, the AMP probe runs: the
        # task's worker spends longer importing torch than the probe takes.
        scaled = speed_scale.start(config, options, experiment_dir)
        if not planned:
            config = machine_space(config, options, experiment_dir)
            say(plan(config, experiment_dir, options.resume))
        accepted.set_result(True)
    except (ConfigError, ClusterUnavailable) as error:
        accepted.set_result(False)
        with contextlib.suppress(TimeoutError):  # the thread stops at its next step
            preparing.exception(timeout=REFUSED_WAIT_S)
        return refuse(error, owns_ray)
    finally:
        if not accepted.done():  # Ray failed to start or was interrupted: no store either
            accepted.set_result(False)
    from search.tracking import StoreUnavailable  # loaded by now, on the thread or here
    from trainables.data import DataUnavailable

    try:
        data = preparing.result()
    except DataUnavailable as error:
        return refuse(ConfigError(config.source, [Problem("data", str(error))]), owns_ray)
    except StoreUnavailable as error:
        return refuse(ConfigError(config.source, [Problem("tracking.uri", str(error))]), owns_ray)
    assert data is not None, "the thread prepares the data once the cluster is accepted"
    from search.execute import run_search

    config = scaled(config)
    return run_search(config, experiment_dir, options, data, owns_ray=owns_ray)


def refuse(error: ConfigError | ClusterUnavailable, owns_ray: bool) -> int:
    """End the search as if nothing had started: Ray, if this started it, is shut down."""
    if owns_ray:
        ray.shutdown()
    said = error.render() if isinstance(error, ConfigError) else f"error: {error}"
    print(said, file=sys.stderr)
    return EXIT_USAGE


def load_and_prepare(config: SearchConfig, accepted: Future[bool]) -> PreparedData | None:
    """On the thread: the modules of the search itself (MLflow, Optuna, Tune, the
    report), the images drawn or decoded, then MLflow's store opened (a new one makes its
    tables: 1-2 s) once the cluster has been `accepted`. None: refused before the images."""
    import search.execute  # noqa: F401  (what the search needs next: seconds of imports)
    from search.tracking import open_store
    from trainables.data import prepare_data

    if accepted.done() and not accepted.result():
        return None
    data = prepare_data(config.data)
    if accepted.result():
        open_store(config.tracking.uri or "")
    return data


# Ray (2.60) leaves CUDA_VISIBLE_DEVICES alone for a task that asks for no GPU, so a CPU
# trial on a machine with cards sees them all; this restores hiding them (the variable is read
# by each worker as a task starts: `ray._private.utils.set_visible_accelerator_ids`).
HIDE_CARDS_FROM_CPU_TRIALS = {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}


def start_ray(address: str | None) -> None:
    # Every worker of this search's job starts with these: the cards hidden from CPU trials
    # (`trainables.classifier.settings_for_trial` also keeps such a trial on the CPU where
    # Ray was started without it) and glibc's one arena (`trainables.host_memory`).
    runtime_env = {"env_vars": {**HIDE_CARDS_FROM_CPU_TRIALS, **WORKER_ENV}}
    if address is None:
        # Ray's own services listen on the machine's address (Ray turns a loopback node
        # address into a reachable one); its token authentication, on by default since
        # 2.59, guards them and is never turned off here. No dashboard is started.
        # "local": an instance of this search's own, as --address's help promises. A bare
        # init would first join the cluster whose address `ray start` left in Ray's temp
        # folder, and wait for ever where that cluster died without `ray stop`.
        ray.init(
            address="local",
            include_dashboard=False,
            log_to_driver=False,  # trial errors still reach the terminal through Tune
            ignore_reinit_error=True,
            runtime_env=runtime_env,
        )
    else:
        try:
            ray.init(address=address, log_to_driver=False, ignore_reinit_error=True,
                     runtime_env=runtime_env)  # fmt: skip
        except ConnectionError as error:
            raise join_refused(address, error) from None


def check_cluster_resources(config: SearchConfig) -> None:
    """Refuse a trial's share that the cluster Ray joined cannot give: Tune would wait for
    it for ever."""
    resources = ray.cluster_resources()
    gpus, cpus = resources.get("GPU", 0), resources.get("CPU", 0)
    if config.resources.gpu_share > 0 and gpus == 0:
        raise ConfigError(
            config.source,
            [
                Problem(
                    "resources.gpu",
                    f"asks for {config.resources.gpu_share:g} GPU per trial, but the "
                    "Ray cluster has no GPUs",
                )
            ],
        )
    if config.resources.cpu > cpus:
        raise ConfigError(
            config.source,
            [
                Problem(
                    "resources.cpu",
                    f"asks for {config.resources.cpu:g} CPUs per trial, but the "
                    f"Ray cluster has {cpus:g}",
                )
            ],
        )
