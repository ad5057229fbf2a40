"""One device's gate: a trial timing its speed has the device to itself, its neighbours
hold at a step boundary meanwhile.

Trials of a search share a device (the node's CPU cores, or a card in quarters), so the
images per second a trial gets depend on who else is stepping at that moment: on an H200
four trials on a quarter each trained at about 0.55x their speed alone, and three processes
on two CPU cores at 0.56x. A speed that belongs to the config is timed while nobody else
steps on its device (`trainables.speed`).

The gate is two lock files per device, in the node's temporary folder, locked with
`fcntl.flock` (released by the kernel when a process ends, however it ends):

- every step of every trial holds the *step* lock shared, and passes the *turnstile*
  (takes it shared and lets go) before it does: microseconds a step, and no wait while
  nobody times;
- a trial that times takes the turnstile exclusively (no neighbour starts another step),
  then the step lock exclusively (the neighbours' steps in flight end first), and times
  its own steps while holding both.

The turnstile is what keeps a timing trial from waiting for ever behind neighbours whose
steps overlap one another. On the CPU the neighbours are held out only where the node is
crowded: each trial registers its threads with the gate, and while the live trials' threads
fit the node's cores (as Ray places whole-CPU trials) nobody waits. A neighbour on another
core barely slows a trial of the contiguous small CNN (two one-thread trials on two cores ran
as fast as one alone, 2026-11-26), but the main search's channels-last + AMP knee, at 6,000
images/s, ran at 0.92-0.98x beside one (docs/RESULTS.md section 28); holding neighbours out of
every window there cost the search more time than timing may (issue 36's 10%).

On a card a step ends on the host while its kernels still run: a trial's host queues work
ahead of the card, so a neighbour that let go of the step lock may leave a step or more
queued, which ran inside the timing trial's window (on an H200, four trials packed on the
card timed 0.82x their speed alone, 2026-11-27). So a neighbour that ends a step while a
trial waits to time (the turnstile held exclusively: one non-blocking test a step, no wait)
first waits for its own queued work (its `drain`, a synchronisation of its card), and only
then lets go: a synchronisation per timing window, none while nobody times. The timing
trial's first steps in the window are warm-up, not counted, besides
(`trainables.speed.SpeedWindow`). Only processes that use this gate wait: another program
on the card does not, and the timed figure cannot hold it out.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

GATES_DIR = "batchsearch-device-gates"


class DeviceGate:
    """The gate of one device (`key`: "cpu", or a card's UUID) on this node."""

    def __init__(self, key: str, directory: Path | None = None) -> None:
        folder = directory or Path(tempfile.gettempdir()) / GATES_DIR
        folder.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", key)
        self._turnstile = os.open(folder / f"{name}.turnstile", os.O_RDWR | os.O_CREAT, 0o666)
        self._steps = os.open(folder / f"{name}.steps", os.O_RDWR | os.O_CREAT, 0o666)
        self._exclusive = False
        self._held = 0  # steps inside steps: one hold, taken once and let go once
        # Waits for this process's work queued on the device (a card's synchronisation):
        # done at the end of a step while a neighbour waits to time. None: nothing queues.
        self.drain: Callable[[], None] | None = None
        self._members = folder / f"{name}.members"
        self._members.mkdir(exist_ok=True)

    def register(self, threads: int) -> None:
        """This process works on the device with `threads` threads (until it ends)."""
        (self._members / str(os.getpid())).write_text(str(threads))

    def leave(self) -> None:
        """This process no longer works on the device: its threads no longer count. A
        Ray actor kept for the next trial (`reuse_actors`) or a test's process lives on
        after its trial ends, and a member it left registered crowded its neighbours."""
        with contextlib.suppress(FileNotFoundError):
            (self._members / str(os.getpid())).unlink()

    def crowded(self, cores: int) -> bool:
        """Whether the live registered processes' threads are more than `cores`."""
        return sum(self._live_members().values()) > cores

    def members(self) -> int:
        """How many live processes have registered: the trials that pass this gate."""
        return len(self._live_members())

    def _live_members(self) -> dict[int, int]:
        """Live registered process -> its threads; an ended process's entry is removed."""
        live = {}
        for member in self._members.iterdir():
            try:
                pid, count = int(member.name), int(member.read_text() or 0)
            except (ValueError, OSError):
                continue  # being written, or gone
            if _alive(pid):
                live[pid] = count
            else:
                with contextlib.suppress(OSError):
                    member.unlink()  # an ended process's
        return live

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Around one step (or any other work on the device): waits only while a neighbour
        times; inside this process's own timing window, or inside another of its own
        steps (an evaluation's batches inside the evaluation), it takes nothing."""
        if self._exclusive or self._held:
            self._held += 1
            try:
                yield
            finally:
                self._held -= 1
            return
        fcntl.flock(self._turnstile, fcntl.LOCK_SH)
        fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        fcntl.flock(self._steps, fcntl.LOCK_SH)
        self._held = 1
        try:
            yield
        finally:
            self._held = 0
            if self.drain is not None and self._someone_waits_to_time():
                self.drain()  # its queued kernels end before the timer's window opens
            fcntl.flock(self._steps, fcntl.LOCK_UN)

    def _someone_waits_to_time(self) -> bool:
        """Whether a neighbour holds the turnstile exclusively (it waits for the steps in
        flight to end, then times): a non-blocking test, microseconds."""
        try:
            fcntl.flock(self._turnstile, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        return False

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """The device to this process alone: entered once every neighbour's step in flight
        has ended; theirs wait at their next step until it is left."""
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._steps, fcntl.LOCK_EX)
            self._exclusive = True
            try:
                yield
            finally:
                self._exclusive = False
                fcntl.flock(self._steps, fcntl.LOCK_UN)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    return True


_gates: dict[str, DeviceGate] = {}


def leave_gates() -> None:
    """This process leaves every device's gate it registered with (its trial ended)."""
    for gate in _gates.values():
        gate.leave()


def gate_of(key: str) -> DeviceGate:
    """This process's gate of a device (one per device: flock locks belong to the open
    file, and two of this process's own would wait for each other)."""
    if key not in _gates:
        _gates[key] = DeviceGate(key)
    return _gates[key]
