"""The command line of `python -m search.run`: its arguments, options and exit codes.

Light on purpose: `--help` and a config error answer before torch, Ray or MLflow load.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NoReturn

EXIT_USAGE = 2  # a user mistake, stated in one message
EXIT_STOPPED = 1  # stopped by Ray's memory monitor: resumable
EXIT_NOTHING_TRAINED = 1  # every trial raised or never started: Ray's errors say why
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT: resumable


def say(message: str = "") -> None:
    """A line for the user, seen as it is said where the output is piped (`| tee`) too."""
    print(message, flush=True)


@dataclass(frozen=True)
class RunOptions:
    run_name: str | None = None  # --name; default: <config name>-<timestamp>
    address: str | None = None  # Ray cluster; default: RAY_ADDRESS or a local instance
    resume: bool = False
    arguments: tuple[str, ...] = ()  # the command line's, as given: `resume_command`'s


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m search.run",
        description="Search batch-size techniques with Ray Tune; log to MLflow; report the "
        "speed / accuracy / generalization Pareto front.",
        epilog="Example: python -m search.run --config configs/cats_dogs.yaml "
        "search.num_samples=4 train.epochs=5",
    )
    parser.add_argument("--config", required=True, help="YAML file (see configs/)")
    parser.add_argument("--num-samples", type=int, help="trials to run (search.num_samples)")
    parser.add_argument("--name", help="name of this search's results folder and parent run")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (tracking.uri)")
    parser.add_argument("--storage-path", help="folder for Ray Tune results (run.storage_path)")
    parser.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS or local)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the search named by --name, or this config's newest one",
    )
    parser.add_argument("overrides", nargs="*", metavar="key.path=value", help="config overrides")
    # overrides anywhere among the flags (`train.epochs=5 --num-samples 2 train.lr=0.01`),
    # where parse_args refused a second run of them as unrecognized arguments
    return parser.parse_intermixed_args(argv)


def resume_command(arguments: Sequence[str], name: str) -> str:
    """The command that continues the search `name` that `arguments` started: the same
    config, flags and overrides (a resumed search keeps its config), its name and
    `--resume`, quoted for a shell, so that it runs as printed."""
    args = parse_args(list(arguments))
    flags = {"--num-samples": args.num_samples, "--tracking-uri": args.tracking_uri,
             "--storage-path": args.storage_path, "--address": args.address}  # fmt: skip
    words = ["python", "-m", "search.run", "--config", args.config]
    for flag, value in flags.items():
        if value is not None:
            words += [flag, str(value)]
    return shlex.join([*words, "--name", name, "--resume", *args.overrides])


@contextlib.contextmanager
def handler_put_back(signum: int) -> Iterator[bool]:
    """The handler of `signum` as it was, put back on leaving; yields whether it may be set
    here (Python sets handlers, and runs them, in the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    before = signal.getsignal(signum)
    try:
        yield True
    finally:
        signal.signal(signum, before)


# Ray settings for a readable terminal; a user's own environment wins.
RAY_ENVIRONMENT = {
    "RAY_AIR_NEW_OUTPUT": "0",  # the table engine, which calls our reporter (search.progress)
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",  # loggers are chosen in search.tuner
    # One checkpoint kept per trial makes Tune snapshot often; on local disk that is cheap.
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
}


def run_as_command(main: Callable[[], int]) -> NoReturn:
    """`main` as a command (`python -m search.run`, `python -m search.capacity`): its code
    is the exit status, and the process ends without Python's teardown of its modules
    (`end_without_teardown`)."""
    ending: dict[str, int | None] = {"code": None}
    atexit.register(end_without_teardown, ending)  # first registered: runs last
    ending["code"] = main()
    sys.exit(ending["code"])


def end_without_teardown(ending: dict[str, int | None]) -> None:
    """The last exit handler of a command: once its `main` has returned, end the process
    without Python's teardown of its modules. By then the command has closed its files,
    ended its MLflow runs and shut Ray down, and the other exit handlers have run (this one
    is registered first, so it runs last); what the teardown would do is collect the
    garbage of every module loaded (torch, Ray, MLflow, the report's libraries): 2.2-2.5 s
    after a default search on 2 cores, all in `finalize_modules` (gdb, 2026-12-02). A
    `main` that raised ends as Python ends it."""
    if ending["code"] is None:
        return
    logging.shutdown()  # registered before this handler, so it would run after it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(ending["code"])
