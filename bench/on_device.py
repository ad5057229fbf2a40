"""One call on the lent GPU machine: `bench/gpu.py` and the test suite, each under its own
time limit, everything written to one folder.

The machine has no network, so the packages it lacks travel with the call: build them here
once (`python bench/device_bundle.py`: .bundle/site.tar.xz, about 41 MiB), carry `.bundle`,
and this unpacks it before anything runs. Then:

    python3 bench/on_device.py --out $OUT      # in the device tool's run, carry [".bundle"]

Written to --out: summary.txt (the card, each part's wall time and exit, the failures),
gpu.csv and gpu-<part>.log (the bench's table and each part's output), tests.log (pytest's
output), junit.xml, and failures.txt (each failed test and the first line of its error). A
part that runs past its limit is stopped, and the next runs: what finished is kept. The
defaults fit in about five minutes on a 16-core machine.
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
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / ".bundle" / "site.tar.xz"
SITE = Path("/tmp/batchsearch-site")
DEFAULT_PARTS = ("card", "loop", "memory", "capacity", "oom")  # packing: when there is time
# Each bench/gpu.py part's time limit, its process's start and CUDA's included (capacity:
# the table's goal is 60 s on an H100-class card).
PART_SECONDS = {"card": 45, "loop": 120, "memory": 50, "capacity": 80, "packing": 90, "oom": 100}


@dataclass(frozen=True)
class Step:
    name: str
    seconds: float
    exit_code: int | None  # None: stopped at its time limit


def unpack_bundle(bundle: Path, site: Path) -> str | None:
    """The bundle's packages in `site`; their path for PYTHONPATH (None: no bundle here,
    the packages must already be installed)."""
    if not bundle.exists():
        return None
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder for everything")
    parser.add_argument(
        "--parts",
        nargs="*",
        default=list(DEFAULT_PARTS),
        help=f"bench/gpu.py's parts (default: {' '.join(DEFAULT_PARTS)}; none: the suite only)",
    )
    parser.add_argument("--part-timeout", type=float, default=None,
                        help=f"seconds per bench part (default: {PART_SECONDS})")  # fmt: skip
    parser.add_argument("--suite-timeout", type=float, default=150, help="seconds for the suite")
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
    started = time.perf_counter()
    env = environment(unpack_bundle(BUNDLE, SITE))
    steps = []
    limits = {part: args.part_timeout or PART_SECONDS[part] for part in args.parts}
    bench = [sys.executable, str(REPO / "bench" / "gpu.py"), "--out", str(out / "gpu.csv"),
             "--epochs", "2", "--parts", *args.parts]  # fmt: skip
    if args.part_timeout:
        bench += ["--part-timeout", str(args.part_timeout)]
    if args.parts:  # each part has its own limit; this one is for all of them
        steps.append(run("bench/gpu.py", bench, out / "gpu.log", sum(limits.values()) + 30, env))
    junit = out / "junit.xml"
    suite = [
        sys.executable,
        "-m",
        "pytest",
        *shlex.split(args.pytest_args),
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
    ]
    if args.workers > 1 and _has_xdist(env):
        suite += ["-n", str(args.workers)]
    streamed = out / "failures-as-they-came.log"
    suite += ["-p", "failures_as_they_come"]
    plugin_path = os.pathsep.join([str(REPO / "bench"), env["PYTHONPATH"]])
    suite_env = {**env, "FAILURES_AS_THEY_COME": str(streamed), "PYTHONPATH": plugin_path}
    steps.append(run("pytest", suite, out / "tests.log", args.suite_timeout, suite_env))
    failed = failures(junit)
    (out / "failures.txt").write_text("".join(f"{line}\n" for line in failed))
    lines = [f"card: {card()}", f"python: {sys.version.split()[0]}"]
    for step in steps:
        ended = "stopped at its limit" if step.exit_code is None else f"exit {step.exit_code}"
        lines.append(f"{step.name}: {step.seconds:.0f} s, {ended}")
    if junit.exists():
        lines.append(f"failed tests: {len(failed)}")
    else:
        log = streamed.read_text().splitlines() if streamed.exists() else []
        came = sum(1 for line in log if line and not line.startswith(" "))
        lines.append(f"failed tests: at least {came} before it was stopped, the suite wrote no "
                     f"report (see {streamed.name} and tests.log)")  # fmt: skip
    lines.append(f"in all: {time.perf_counter() - started:.0f} s")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if (out / "gpu.csv").exists():
        print((out / "gpu.log").read_text()[-6000:])
    return 0 if all(step.exit_code == 0 for step in steps) else 1


def _has_xdist(env: dict[str, str]) -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import xdist"], env=env, capture_output=True, check=False
    )
    return probe.returncode == 0


if __name__ == "__main__":
    sys.exit(main())
