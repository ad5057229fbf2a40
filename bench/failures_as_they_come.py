"""A pytest plugin `bench/on_device.py` loads: each failed or erring test is appended to a
file the moment its result arrives, with the last lines of its error. A suite stopped at its
time limit writes no JUnit report; this file still says what failed until then.

    FAILURES_AS_THEY_COME=failures.log python -m pytest -p failures_as_they_come
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "FAILURES_AS_THEY_COME"
_TAIL_LINES = 15
_enabled = {"on": False}


def pytest_configure(config: pytest.Config) -> None:
    # Under xdist the workers' reports reach the controller, which writes them once.
    _enabled["on"] = bool(os.environ.get(ENV)) and not hasattr(config, "workerinput")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _enabled["on"] or not report.failed:
        return
    what = "failed" if report.when == "call" else f"error in {report.when}"
    tail = str(report.longrepr).strip().splitlines()[-_TAIL_LINES:]
    with Path(os.environ[ENV]).open("a") as log:
        log.write(f"{report.nodeid}: {what}\n" + "".join(f"    {line}\n" for line in tail))
