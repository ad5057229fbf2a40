"""Numbers on a command line, checked where argparse reads them: a mistake is argparse's
one message naming the option, exit 2 (`python -m analysis.report`,
`python -m search.capacity`). Standard library only."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def number_in(
    kind: Callable[[str], float], low: float, high: float = math.inf, *, what: str
) -> Callable[[str], float]:
    """An argparse type: `kind` of the text (int or float), from `low` to `high`; else
    "TEXT is not WHAT"."""

    def read(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not {what}")
        return value

    return read


ACCURACY = number_in(float, 0.0, 1.0, what="an accuracy from 0 to 1")
COUNT = number_in(int, 1, what="a whole number of 1 or more")
POSITIVE = number_in(float, math.ulp(0.0), what="a number above 0")
