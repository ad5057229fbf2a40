"""One call on the lent GPU machine: `bench/gpu.py` and the test suite, each under its own
time limit, everything written to one folder.

The machine has no network, so the packages it lacks travel with the call: build them here
once (`python bench/device_bundle.py`: .bundle/site.tar.xz, about 41 MiB), carry `.bundle`,
and this unpacks it before anything runs. Then:

    python3 bench/on_device.py --out $OUT      # in the device tool's run, carry [".bundle"]

The defaults (the card's tests 100 s, the part by_memory 450 s, no suite) end inside one
call's 600 s (on an H200, 2026-11-28: 80 s and 312 s, the second search stopped at the
part's old 300 s). Then, at once on the same warm machine, a second call: the suite alone
(`--parts --card-tests '' --workers 15 --suite-timeout 300`: it reached 62% in 140 s), or
the parts measured before (`--parts packing oom capacity --card-tests '' --suite-timeout 0`,
about 330 s).

First the tests only a card can run (tests/trainables/test_on_a_real_card.py, one per
technique), then the bench's parts, then (with --suite-timeout) the rest of the suite.
Written to --out, seven files at most (a call brings back at most eight): summary.txt (the
card, each step's wall time and exit, the failures), gpu.csv (the bench's table),
card-tests.log and, with the suite, tests.log (pytest's output), failures.txt (each failed
test and the first line of its error), failures-as-they-came.log (where a test fails: each
failure with the end of its error, written as it happens: a suite stopped at its limit
still names them) and parts.tar.gz (each part's CSV and log, the JUnit reports). A step that
runs past its limit is stopped, with everything it started, and the next runs: what finished
is kept, and every bench row is written as it is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / ".bundle" / "site.tar.xz"
SITE = Path("/tmp/batchsearch-site")
BUNDLE_PYTHON = (3, 12)  # the lent machine's, which bench/device_bundle.py builds for
# What no card has measured yet, first (docs/RESULTS.md sections 35 and 42): packing by
# memory with the shares the driver's meter sizes (two searches, about 310 s on an H200: the
# fixed one took 145 s, the packed one was stopped at 300 s). The packing, oom and capacity
# parts ran on an H200 at 83da029, the card, loop and memory parts earlier.
DEFAULT_PARTS = ("by_memory",)
# Each bench/gpu.py part's time limit, its process's start and CUDA's included (capacity:
# the table's goal is 60 s on an H100-class card).
PART_SECONDS = {"card": 45, "loop": 120, "memory": 50, "capacity": 80, "packing": 90,
                "by_memory": 420, "oom": 140}  # fmt: skip
BENCH_SLACK_SECONDS = 30  # bench/gpu.py's own start and end, beside its parts' limits
CARD_TESTS_SECONDS = 100  # 20 tests in 71 s on an H200 (2026-11-28)
SUITE_SECONDS = 0  # the suite has a call of its own (the docstring's second call)
CALL_SECONDS = 600  # the device tool's limit on one command


def default_call_seconds() -> float:
    """The most a call with the defaults can take: every step at its limit."""
    parts = sum(PART_SECONDS[part] for part in DEFAULT_PARTS) + BENCH_SLACK_SECONDS
    return CARD_TESTS_SECONDS + parts + SUITE_SECONDS


@dataclass(frozen=True)
class Step:
    name: str
    seconds: float
    exit_code: int | None  # None: stopped at its time limit


def unpack_bundle(bundle: Path, site: Path) -> str | None:
    """The bundle's packages in `site`; their path for PYTHONPATH (None: no bundle here,
    the packages must already be installed)."""
    if not bundle.exists() or sys.version_info[:2] != BUNDLE_PYTHON:
        return None  # its packages are built for the machine's Python alone
    if not (site / ".unpacked").exists():
        shutil.rmtree(site, ignore_errors=True)
        site.mkdir(parents=True)
        with tarfile.open(bundle, "r:xz") as archive:
            archive.extractall(site, filter="data")
        (site / ".unpacked").touch()
    return str(site)


def environment(site: str | None) -> dict[str, str]:
    paths = [path for path in (site, str(REPO), os.environ.get("PYTHONPATH")) if path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1"}


def run_limited(
    command: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None
) -> int | None:
    """`command`'s exit code, its output in `log`; None where it ran past `timeout_s`.
    It runs in a process group of its own, ended with it: what it started (Ray, pytest's
    workers, a search) never keeps the card busy for whatever runs next."""
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            code: int | None = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        _end_group(process)
        if code is None:
            out.write(f"\n[stopped: over its limit of {timeout_s:.0f} s]\n")
    return code


def _end_group(process: subprocess.Popen) -> None:
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal_number)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def run(name: str, command: list[str], log: Path, timeout_s: float, env: dict[str, str]) -> Step:
    started = time.perf_counter()
    code = run_limited(command, log, timeout_s, env)
    return Step(name, time.perf_counter() - started, code)


def failures(junit: Path) -> list[str]:
    """Each failed or erring test of a JUnit report, with the first line of why."""
    if not junit.exists():
        return []
    found = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        for problem in (*case.findall("failure"), *case.findall("error")):
            why = (problem.get("message") or problem.text or "").strip().splitlines()
            found.append(f"{case.get('classname')}::{case.get('name')}: {why[0] if why else ''}")
    return found


def card() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "no nvidia-smi: no GPU here"
    return out.stdout.strip() or "no GPU listed by nvidia-smi"


def torch_build(env: dict[str, str]) -> str:
    """PyTorch's version and the CUDA and cuDNN it was built with, as the suite sees them."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__, 'CUDA', torch.version.cuda,"
         " 'cuDNN', torch.backends.cudnn.version())"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return probe.stdout.strip() or f"not importable: {probe.stderr.strip()[-200:]}"


CARD_TESTS = "tests/trainables/test_on_a_real_card.py"


@dataclass(frozen=True)
class Suite:
    """One pytest run of the call: its name, what it is given, its limit, where it logs."""

    name: str
    arguments: list[str]
    timeout_s: float
    log: Path
    junit: Path


def run_suite(suite: Suite, workers: int, streamed: Path, env: dict[str, str]) -> Step:
    command = [sys.executable, "-m", "pytest", *suite.arguments, "-p", "no:cacheprovider",
               f"--junitxml={suite.junit}", "-p", "on_device"]  # fmt: skip
    # -p on_device: this module as a plugin (its pytest_* hooks below) writes each failure
    # to `streamed` as it arrives.
    if workers > 1 and _has_xdist(env):
        command += ["-n", str(workers)]
    plugin_path = os.pathsep.join([str(REPO / "bench"), env["PYTHONPATH"]])
    suite_env = {**env, FAILURES_AS_THEY_COME: str(streamed), "PYTHONPATH": plugin_path}
    return run(suite.name, command, suite.log, suite.timeout_s, suite_env)


def pack(work: Path, archive: Path) -> None:
    """Everything the parts wrote, but the searches' databases and results, as one file: a
    call brings back at most 8 files."""
    skipped = ("mlflow.db", "searches", "ray_results")  # searches: bench/gpu.py's SEARCHES
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(work.iterdir()):
            if path.name not in skipped:
                tar.add(path, arcname=path.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder for everything")
    parser.add_argument(
        "--parts",
        nargs="*",
        default=list(DEFAULT_PARTS),
        help=f"bench/gpu.py's parts (default: {' '.join(DEFAULT_PARTS)}; none: no bench)",
    )
    parser.add_argument("--part-timeout", type=float, default=None,
                        help=f"seconds per bench part (default: {PART_SECONDS})")  # fmt: skip
    parser.add_argument("--card-tests", default=CARD_TESTS,
                        help=f"run first, alone (default: {CARD_TESTS}; '': none)")  # fmt: skip
    parser.add_argument("--card-tests-timeout", type=float, default=CARD_TESTS_SECONDS,
                        help="their seconds")  # fmt: skip
    parser.add_argument("--suite-timeout", type=float, default=SUITE_SECONDS,
                        help="seconds for the suite (default 0: none)")  # fmt: skip
    parser.add_argument(
        "--workers",
        type=int,
        default=min(12, max(1, (os.cpu_count() or 2) - 2)),
        help="pytest-xdist workers where it is installed (default: cores - 2)",
    )
    parser.add_argument(
        "--pytest-args",
        default="-q",
        help="what pytest is given besides its report options, as one string (default: -q)",
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="on-device-"))
    started = time.perf_counter()
    env = environment(unpack_bundle(BUNDLE, SITE))
    streamed = out / "failures-as-they-came.log"
    suites = []
    if args.card_tests:
        suites.append(Suite("card tests", ["-v", *shlex.split(args.card_tests)],
                            args.card_tests_timeout, out / "card-tests.log",
                            work / "card-tests.xml"))  # fmt: skip
    ignored = [f"--ignore={path}" for path in shlex.split(args.card_tests)]
    suite = Suite("pytest", [*shlex.split(args.pytest_args), *ignored], args.suite_timeout,
                  out / "tests.log", work / "junit.xml")  # fmt: skip
    if args.suite_timeout > 0:
        suites.append(suite)
    steps = []
    # The card's own tests first: they are what only this machine can run.
    if args.card_tests:
        steps.append(run_suite(suites[0], min(args.workers, 4), streamed, env))
    limits = {part: args.part_timeout or PART_SECONDS[part] for part in args.parts}
    bench = [sys.executable, str(REPO / "bench" / "gpu.py"), "--out", str(work / "gpu.csv"),
             "--epochs", "2", "--parts", *args.parts]  # fmt: skip
    if args.part_timeout:
        bench += ["--part-timeout", str(args.part_timeout)]
    if args.parts:  # each part has its own limit; this one is for all of them
        limit = sum(limits.values()) + BENCH_SLACK_SECONDS
        steps.append(run("bench/gpu.py", bench, work / "gpu.log", limit, env))
        if (work / "gpu.csv").exists():
            shutil.copy(work / "gpu.csv", out / "gpu.csv")
    if args.suite_timeout > 0:
        steps.append(run_suite(suite, args.workers, streamed, env))
    failed = [line for suite in suites for line in failures(suite.junit)]
    (out / "failures.txt").write_text("".join(f"{line}\n" for line in failed))
    lines = [f"card: {card()}", f"python: {sys.version.split()[0]}", f"torch: {torch_build(env)}"]
    for step in steps:
        ended = "stopped at its limit" if step.exit_code is None else f"exit {step.exit_code}"
        lines.append(f"{step.name}: {step.seconds:.0f} s, {ended}")
    if all(suite.junit.exists() for suite in suites):
        lines.append(f"failed tests: {len(failed)}")
    else:
        log = streamed.read_text().splitlines() if streamed.exists() else []
        came = sum(1 for line in log if line and not line.startswith(" "))
        lines.append(f"failed tests: at least {came}; a suite stopped at its limit wrote no "
                     f"report (see {streamed.name} and its log)")  # fmt: skip
    lines.append(f"in all: {time.perf_counter() - started:.0f} s")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    pack(work, out / "parts.tar.gz")
    print("\n".join(lines))
    if (work / "gpu.log").exists():
        print((work / "gpu.log").read_text()[-6000:])
    return 0 if all(step.exit_code == 0 for step in steps) else 1


# --- the suite's plugin (`-p on_device`): each failure written the moment it arrives --------

FAILURES_AS_THEY_COME = "FAILURES_AS_THEY_COME"
_TAIL_LINES = 15
_streaming = {"on": False}


def pytest_configure(config: Any) -> None:
    # Under xdist the workers' reports reach the controller, which writes them once.
    _streaming["on"] = bool(os.environ.get(FAILURES_AS_THEY_COME)) and not hasattr(
        config, "workerinput"
    )


def pytest_runtest_logreport(report: Any) -> None:
    """A suite stopped at its time limit writes no JUnit report: this file still says what
    failed until then, with the last lines of each error."""
    if not _streaming["on"] or not report.failed:
        return
    what = "failed" if report.when == "call" else f"error in {report.when}"
    tail = str(report.longrepr).strip().splitlines()[-_TAIL_LINES:]
    with Path(os.environ[FAILURES_AS_THEY_COME]).open("a") as log:
        log.write(f"{report.nodeid}: {what}\n" + "".join(f"    {line}\n" for line in tail))


def _has_xdist(env: dict[str, str]) -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import xdist"], env=env, capture_output=True, check=False
    )
    return probe.returncode == 0


if __name__ == "__main__":
    sys.exit(main())
