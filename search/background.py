"""Work on a daemon thread whose result is awaited later: the search's start (the data
prepared while Ray starts) and end (Ray shut down while the report is written)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def in_background(work: Callable[[], T], name: str) -> Future[T]:
    """`work()` started on a daemon thread: an interrupted search does not wait for it
    (a `ThreadPoolExecutor`'s workers are joined at exit, so Ctrl-C would wait for a long
    image decode)."""
    future: Future[T] = Future()

    def run() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(work())
            except BaseException as error:  # handed to whoever asks for the result
                future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
