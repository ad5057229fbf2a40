"""`bench/scale_length.py`: the search's speed scale timed at several lengths in turn, run
briefly here."""

import re
import subprocess
import sys

from tests.processes import REPO, run_bench
from trainables.reference_kinds import REFERENCE_KINDS


def test_each_round_times_every_kind_at_each_length_in_turn_and_the_end_gives_their_spread():
    done = run_bench("scale_length.py", "--seconds", "0.1", "0.05", "--rounds", "2")
    rounds = re.findall(r"^round (\d), ([\d.]+) s: (.+)$", done.stdout, re.M)
    # the second round takes the lengths the other way round
    assert [(number, length) for number, length, _ in rounds] == [
        ("1", "0.1"), ("1", "0.05"), ("2", "0.05"), ("2", "0.1")]  # fmt: skip
    assert all(re.findall(r"(\w+) \d+", each) == list(REFERENCE_KINDS) for *_, each in rounds)
    ends = re.findall(r"^([\d.]+) s, (\w+): median (\d+) images/s, sd of the logarithm "
                      r"([\d.]+)%$", done.stdout, re.M)  # fmt: skip
    assert [(length, kind) for length, kind, *_ in ends] == [
        (length, kind) for length in ("0.1", "0.05") for kind in REFERENCE_KINDS
    ]
    assert all(int(median) > 0 for *_, median, _ in ends)


def test_one_round_is_refused_for_it_has_no_spread():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "scale_length.py"),
                           "--rounds", "1"], capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 2 and "--rounds is at least 2" in done.stderr
