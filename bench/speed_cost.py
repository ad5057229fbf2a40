"""What timing each config's speed costs a search: the main search with its timing windows
(the default) and without (`train.speed_precision=0`), side by side on one machine, each
`python -m search.run` in a fresh folder, `--repeats` times alternating which goes first.

Printed per run: its wall seconds, and for the timed run the median relative width of the
trials' throughput intervals; at the end the ratio of the median wall times, timed over
untimed (the issue's aim: at most 1.10).

    python bench/speed_cost.py [--config configs/cats_dogs.yaml] [--repeats 2]
        [key.path=value ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ablation_cost import print_ratio, side_by_side  # bench/, first on a script's path

REPO = Path(__file__).resolve().parents[1]
UNTIMED = "train.speed_precision=0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "cats_dogs.yaml"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="key.path=value for both searches")
    args = parser.parse_args(argv)
    cases = [("untimed", [UNTIMED]), ("timed", [])]
    table = side_by_side(args.config, cases, args.repeats, args.overrides)
    print_ratio(table, "timed", "untimed", aim=1.10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
