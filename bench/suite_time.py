"""The test suite's wall time on one pytest process against several workers, alternated.

Runs `python -m pytest` and `python -m pytest -n WORKERS --dist loadfile` (pytest-xdist;
`loadfile` keeps each file's tests, and so its module fixtures, on one worker) in turns,
A B A B, so that the machine's drift falls on both. Prints each run as it ends: its wall
time, the share of the machine's CPU time that was busy while it ran (from /proc/stat, all
cores), its exit status and pytest's count line; then each side's median and the median of
the rounds' ratios workers / one process. A run that fails is printed and kept out of the
medians.

    python bench/suite_time.py [--rounds 2] [--workers 2] [--pytest-args "-m 'not slow'"]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SuiteRun:
    label: str
    seconds: float
    busy: float | None  # share of all cores' time busy; None where /proc/stat is not there
    returncode: int
    counts: str  # pytest's last line: "2276 passed, 20 skipped in 588.22s"


def cpu_times() -> tuple[int, int] | None:
    """(all, idle) jiffies of the machine so far, from /proc/stat's first line."""
    try:
        fields = [int(value) for value in Path("/proc/stat").read_text().split()[1:11]]
    except OSError:
        return None
    return sum(fields), fields[3] + fields[4]  # idle and iowait


def run_suite(label: str, arguments: list[str]) -> SuiteRun:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *arguments]
    before, start = cpu_times(), time.monotonic()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    seconds, after = time.monotonic() - start, cpu_times()
    busy = None
    if before is not None and after is not None and after[0] > before[0]:
        busy = 1 - (after[1] - before[1]) / (after[0] - before[0])
    lines = [line.strip("= ") for line in done.stdout.splitlines() if line.strip()]
    return SuiteRun(label, seconds, busy, done.returncode, lines[-1] if lines else "")


def describe(run: SuiteRun) -> str:
    busy = "?" if run.busy is None else f"{run.busy:.0%}"
    return (f"{run.label}: {run.seconds:.0f} s, CPU busy {busy}, exit {run.returncode}, "
            f"{run.counts}")  # fmt: skip


def summary(runs: list[SuiteRun], one: str, several: str) -> list[str]:
    """Each side's median wall time over its passing runs, and the median over rounds of
    several / one (a round: one run of each, both passing)."""
    lines = []
    for label in (one, several):
        passing = [run.seconds for run in runs if run.label == label and run.returncode == 0]
        if passing:
            lines.append(f"{label}: median {statistics.median(passing):.0f} s over "
                         f"{len(passing)} passing runs")  # fmt: skip
    pairs = zip(runs[0::2], runs[1::2], strict=False)
    ratios = [b.seconds / a.seconds for a, b in pairs if a.returncode == b.returncode == 0]
    if ratios:
        each = ", ".join(f"{ratio:.2f}" for ratio in ratios)
        lines.append(f"{several} / {one}: median {statistics.median(ratios):.2f} "
                     f"over {len(ratios)} rounds ({each})")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="pairs of runs (default: 2)")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers (default: 2)")
    parser.add_argument(
        "--pytest-args", default="", help="given to both runs, as one string: \"-m 'not slow'\""
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.workers < 2:
        parser.error("--rounds must be at least 1 and --workers at least 2")
    given = shlex.split(args.pytest_args)
    one, several = "one process", f"{args.workers} workers"
    print(f"pytest {' '.join(given) or '(the whole suite)'}: {args.rounds} rounds, "
          f"{one} then {several}", flush=True)  # fmt: skip
    runs = []
    for _ in range(args.rounds):
        for label, extra in ((one, []), (several, ["-n", str(args.workers), "--dist", "loadfile"])):
            runs.append(run_suite(label, [*given, *extra]))
            print(describe(runs[-1]), flush=True)
    for line in summary(runs, one, several):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
