"""`bench/on_device.py`, the one call a GPU session makes, run here: everything lands in one
folder, a part over its limit is stopped and named, and failed tests are listed."""

import importlib.util
import os
import re
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from tests.conftest import REPO
from tests.processes import bench_module

spec = importlib.util.spec_from_file_location("on_device", REPO / "bench" / "on_device.py")
on_device_module = importlib.util.module_from_spec(spec)
sys.modules.setdefault("on_device", on_device_module)  # its dataclasses look themselves up
spec.loader.exec_module(on_device_module)

pytestmark = pytest.mark.slow


def on_device(out, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / "on_device.py"), "--out", str(out), *args],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def suite_of(tmp_path, source: str):
    """A folder holding one test module with `source`: the suite the call runs."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_probe.py").write_text(source)
    return tests


PASSES = "def test_passes():\n    assert True\n"


def test_a_part_over_its_limit_is_stopped_and_a_failing_test_is_listed(tmp_path):
    fails = "\n\ndef test_fails():\n    assert 1 == 2, 'the card said no'\n"
    tests = suite_of(tmp_path, PASSES + fails)
    card_tests = tmp_path / "test_card.py"
    card_tests.write_text("def test_on_the_card():\n    assert True\n")
    out = tmp_path / "out"
    finished = on_device(out, "--parts", "loop", "--part-timeout", "0.5", "--card-tests",
                         str(card_tests), "--pytest-args", f"-q {tests}",
                         "--workers", "2", "--suite-timeout", "100")  # fmt: skip
    assert finished.returncode == 1  # a test failed
    summary = (out / "summary.txt").read_text()
    assert "card tests:" in summary and "pytest:" in summary and "card:" in summary
    assert "failed tests: 1" in summary
    assert "test_fails" in (out / "failures.txt").read_text()
    assert "the card said no" in (out / "failures.txt").read_text()
    assert "the card said no" in (out / "failures-as-they-came.log").read_text()
    card_log = (out / "card-tests.log").read_text()  # xdist, where installed, words it so:
    assert re.search(r"test_on_the_card PASSED|PASSED \S*::test_on_the_card", card_log)
    rows = (out / "gpu.csv").read_text()
    assert "the part ran out of time" in rows  # loop: stopped after half a second
    with tarfile.open(out / "parts.tar.gz") as parts:
        assert {"gpu-loop.log", "junit.xml", "card-tests.xml"} <= set(parts.getnames())
    # The device tool brings back at most 8 files.
    assert len([path for path in out.rglob("*") if path.is_file()]) <= 8


def test_a_suite_stopped_at_its_limit_still_names_what_failed_before(tmp_path):
    source = (
        "import time\n\ndef test_a_fails():\n    assert False, 'seen before the limit'\n\n"
        "def test_b_hangs():\n    time.sleep(120)\n"
    )
    tests = suite_of(tmp_path, source)
    out = tmp_path / "out"
    finished = on_device(out, "--parts", "--card-tests", "", "--workers", "1",
                         "--suite-timeout", "5", "--pytest-args", f"-q {tests}")  # fmt: skip
    assert finished.returncode == 1
    summary = (out / "summary.txt").read_text()
    assert "pytest: " in summary and "stopped at its limit" in summary
    assert "failed tests: at least 1" in summary
    came = (out / "failures-as-they-came.log").read_text()
    assert "test_probe.py::test_a_fails: failed" in came and "seen before the limit" in came


def test_a_bench_part_stopped_midway_keeps_the_rows_it_measured(tmp_path):
    """Each row is on disk as it is measured: a part killed after its first row keeps it."""
    csv_path = tmp_path / "gpu-loop.csv"
    dies_after_one_row = (
        "import os, signal, sys\n"
        f"sys.path[:0] = [{str(REPO / 'bench')!r}, {str(REPO)!r}]\n"
        "import gpu\n"
        "def rows():\n"
        "    yield gpu.Row('loop', 'measured first', 1.5, 'images/s')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        f"gpu.write_csv(rows(), gpu.Path({str(csv_path)!r}), 'a card')\n"
    )
    code = on_device_module.run_limited(
        [sys.executable, "-c", dies_after_one_row], tmp_path / "log.txt", 120
    )
    assert code == -signal.SIGKILL
    assert [row.measurement for row in _gpu_module().read_csv(csv_path)] == ["measured first"]


def _gpu_module():
    return bench_module("gpu")


def test_the_suite_alone_passing_is_a_clean_exit(tmp_path):
    tests = suite_of(tmp_path, PASSES)
    out = tmp_path / "out"
    finished = on_device(out, "--parts", "--card-tests", "", "--pytest-args", f"-q {tests}")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert (out / "failures.txt").read_text() == ""
    assert not (out / "gpu.csv").exists()


def test_a_command_over_its_limit_is_ended_with_everything_it_started(tmp_path):
    """A part's Ray workers or pytest's would otherwise hold the card for the next part."""
    pid_file = tmp_path / "grandchild.pid"
    starts_a_child = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(60)"
    )
    log = tmp_path / "log.txt"
    code = on_device_module.run_limited([sys.executable, "-c", starts_a_child], log, 3.0)
    assert code is None and "[stopped: over its limit of 3 s]" in log.read_text()
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # reaped by init once killed
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"process {grandchild} outlived the limit")


def test_a_call_with_the_defaults_ends_inside_the_device_tools_limit_with_every_step_at_its_own():
    assert on_device_module.default_call_seconds() <= on_device_module.CALL_SECONDS
