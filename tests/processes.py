"""Shared helpers for tests that run the CLI as users do and then hurt it: start it in its
own session, find the processes a search started, kill them, wait for files to appear."""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType

from tests.conftest import REPO


@contextmanager
def ray_temp_dir() -> Iterator[Path]:
    """A short RAY_TMPDIR of its own (Ray's socket paths must stay short), so that every
    process a search starts can be found by its environment and ended afterwards."""
    path = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    try:
        yield path
    finally:
        kill_processes_with_env("RAY_TMPDIR", str(path))


def processes_with_env(key: str, value: str, name: str | None = None) -> list[int]:
    """Pids whose environment has key=value (and whose command line contains `name`)."""
    wanted = f"{key}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if name is None or name in command:
            found.append(int(entry.name))
    return found


def kill_processes_with_env(key: str, value: str) -> None:
    for pid in processes_with_env(key, value):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def importable(*folders: Path) -> str:
    """A PYTHONPATH with this checkout and `folders` first, then whatever the suite itself
    was given (on the lent GPU machine the project's packages are there, not installed)."""
    inherited = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    return os.pathsep.join([str(REPO), *map(str, folders), *inherited])


def free_port() -> int:
    """A loopback port nothing listens on now (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cli_env(ray_tmp: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment a user's shell would give the CLI, with this checkout importable."""
    env = {**os.environ, "PYTHONPATH": importable(), **extra}
    if ray_tmp is not None:
        env["RAY_TMPDIR"] = str(ray_tmp)
    return env


def start_cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    """`python -m search.run ...` in its own process group, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "search.run", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def bench_module(name: str) -> ModuleType:
    """`bench/NAME.py` as a module, `bench/` on the path while it imports (the bench scripts
    import each other, as they do run as scripts from there)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "bench"))


def run_bench(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python bench/SCRIPT ARGS...` as a user runs it from this checkout, output captured;
    fails the test, with the script's stderr, where it exits other than 0."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / script), *args],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          env=cli_env())  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def run_cli(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300):
    return subprocess.run(
        [sys.executable, "-m", "search.run", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")


def reported_epochs(trial_dir: Path) -> int:
    """Epochs a trial has reported so far, from Tune's result.json."""
    result = trial_dir / "result.json"
    if not result.exists():
        return 0
    return sum(1 for line in result.read_text().splitlines() if line.strip())
