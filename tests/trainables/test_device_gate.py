"""The device's gate between trial processes of one node: while one times, no step of
another is inside its window; nobody waits while nobody times; the CPU is crowded only
where the live trials' threads are more than its cores."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO
from trainables.device_gate import DeviceGate

STEPPER = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from trainables.device_gate import DeviceGate
gate = DeviceGate("cpu", Path({folder!r}))
steps, end = [], time.monotonic() + {seconds}
while time.monotonic() < end:
    with gate.step():
        started = time.monotonic()
        time.sleep(0.002)  # a step's work
        steps.append((started, time.monotonic()))
Path({out!r}).write_text(json.dumps(steps))
"""

TIMER = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from trainables.device_gate import DeviceGate
gate = DeviceGate("cpu", Path({folder!r}))
windows = []
time.sleep(0.2)  # the neighbours are stepping by now
for _ in range(4):
    with gate.exclusive():
        started = time.monotonic()
        for _ in range(10):
            with gate.step():  # its own steps inside the window take nothing
                time.sleep(0.003)
        windows.append((started, time.monotonic()))
    time.sleep(0.05)
Path({out!r}).write_text(json.dumps(windows))
"""


def start(source: str, **values) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", source.format(repo=str(REPO), **values)])


def test_while_a_trial_times_no_step_of_its_neighbours_is_inside_its_window(tmp_path):
    folder = str(tmp_path / "gates")
    steppers = [
        start(STEPPER, folder=folder, seconds=1.5, out=str(tmp_path / f"steps{n}.json"))
        for n in range(2)
    ]
    timer = start(TIMER, folder=folder, out=str(tmp_path / "windows.json"))
    for process in [*steppers, timer]:
        assert process.wait(timeout=60) == 0
    windows = json.loads((tmp_path / "windows.json").read_text())
    assert len(windows) == 4
    for n in range(2):
        steps = json.loads((tmp_path / f"steps{n}.json").read_text())
        assert len(steps) > 100  # they stepped all along, between the windows
        inside = [
            (step, window)
            for step in steps
            for window in windows
            if step[0] < window[1] and window[0] < step[1]  # the intervals overlap
        ]
        assert inside == []


def test_a_step_holds_the_gate_only_shared_so_nobody_waits_while_nobody_times(tmp_path):
    """Inside a step, a neighbour (another open file: as another process) can still take
    both locks shared without waiting: steps never exclude each other."""
    import fcntl

    gate = DeviceGate("cpu", tmp_path)
    neighbour = [os.open(tmp_path / f"cpu.{part}", os.O_RDWR) for part in ("turnstile", "steps")]
    try:
        with gate.step():
            for descriptor in neighbour:
                fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)  # raises if it must wait
                fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        for descriptor in neighbour:
            os.close(descriptor)


def test_the_cpu_is_crowded_only_where_the_live_trials_threads_are_more_than_its_cores(
    tmp_path,
):
    gate = DeviceGate("cpu", tmp_path)
    gate.register(1)
    assert not gate.crowded(cores=2)
    neighbour = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "cpu.members" / str(neighbour.pid)).write_text("2")
        assert gate.crowded(cores=2)  # 1 + 2 threads on 2 cores
    finally:
        neighbour.kill()
        neighbour.wait()
    assert not gate.crowded(cores=2)  # an ended process's threads no longer count
    assert not (tmp_path / "cpu.members" / str(neighbour.pid)).exists()
    assert (tmp_path / "cpu.members" / str(os.getpid())).read_text() == "1"


def test_a_step_inside_a_step_keeps_the_hold_until_the_outer_one_ends(tmp_path):
    """An evaluation holds the gate and each of its batches passes it again: the inner
    release must not let a timing neighbour in while the evaluation goes on."""
    import fcntl

    gate = DeviceGate("cpu", tmp_path)
    neighbour = os.open(tmp_path / "cpu.steps", os.O_RDWR)  # another open file: as a process
    try:
        with gate.step():
            with gate.step():
                pass
            try:
                fcntl.flock(neighbour, fcntl.LOCK_EX | fcntl.LOCK_NB)
                raise AssertionError("the outer hold was let go by the inner step's end")
            except BlockingIOError:
                pass
        fcntl.flock(neighbour, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the outer ends
    finally:
        os.close(neighbour)


def test_a_neighbour_ending_a_step_while_a_trial_waits_to_time_first_drains_its_queue(
    tmp_path,
):
    """On a card a step ends on the host while its kernels still run: a neighbour that lets
    go while a trial waits to time first waits for its queued work (found on an H200)."""
    import threading

    neighbour, timer = DeviceGate("card", tmp_path), DeviceGate("card", tmp_path)
    drained, timed = [], threading.Event()
    neighbour.drain = lambda: drained.append(timed.is_set())

    with neighbour.step():
        pass
    assert drained == []  # nobody times: a step ends as it began, without waiting

    def time_alone() -> None:
        with timer.exclusive():
            timed.set()

    with neighbour.step():
        waiting = threading.Thread(target=time_alone)
        waiting.start()
        while not timer_holds_the_turnstile(tmp_path):
            pass
    waiting.join(timeout=10)
    assert drained == [False]  # once, before the timer's window opened
    assert timed.is_set()


def timer_holds_the_turnstile(folder) -> bool:
    import fcntl

    descriptor = os.open(folder / "card.turnstile", os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)
    return False


def test_a_trial_on_a_card_drains_by_synchronising_its_card(fake_cuda, own_device_gates):
    import torch

    from trainables.timing import trial_gate

    gate = trial_gate(torch.device("cuda", 0))
    fake_cuda.calls.clear()
    gate.drain()
    assert fake_cuda.calls == ["synchronize"]
    assert trial_gate(torch.device("cpu")).drain is None
