"""`bench/alternation_estimators.py`: an A/A alternation read two ways, run briefly here."""

import re
import subprocess
import sys

from tests.conftest import REPO
from tests.processes import cli_env


def test_each_block_length_gets_both_readings_and_their_ratio():
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "alternation_estimators.py"), "--batch-size", "4",
         "--blocks", "0.01", "0.02", "--seconds", "0.3", "--repeats", "2"],
        capture_output=True, text=True, timeout=300, check=False, env=cli_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    read_twice = (r"repeat (\d), blocks of ([\d.]+) s: (\d+) rounds; sum: sd [\d.]+, "
                  r"\+-[\d.]+ points; median step: sd [\d.]+, \+-[\d.]+ points")  # fmt: skip
    rounds = re.findall(read_twice, done.stdout)
    assert {(repeat, block) for repeat, block, _ in rounds} == {
        ("1", "0.01"),
        ("1", "0.02"),
        ("2", "0.01"),
        ("2", "0.02"),
    }
    assert all(int(count) >= 2 for _, _, count in rounds)
    ratios = re.findall(
        r"blocks of ([\d.]+) s: half width, median step / sum: ([\d.]+)x", done.stdout
    )
    assert [block for block, _ in ratios] == ["0.01", "0.02"]
    assert all(float(ratio) > 0 for _, ratio in ratios)
