"""What timing each config's speed costs a search: the main search with its timing windows
(the default) and without (`train.speed_precision=0`), side by side on one machine, each
`python -m search.run` in a fresh folder, `--repeats` times alternating which goes first.

Printed per run: its wall seconds, and for the timed run the median relative width of the
trials' throughput intervals; at the end the ratio of the median wall times, timed over
untimed (the issue's aim: at most 1.10).

The default search's two sides take different paths: TPE suggests from the speeds it is
told, which timing changes, and the rungs stop other trials, so a pair can differ by a
path's worth of trials (docs/RESULTS.md, section 55: one pair's searches 59.9 against 44.6
s). With `search.sampler=random search.early_stopping=null` both sides train the same
configs, all their epochs: the search's part is the same work, and what differs is the
timing (the ablations still start from each side's own knee).

    python bench/speed_cost.py [--config configs/cats_dogs.yaml] [--repeats 2]
        [key.path=value ...]
"""

from __future__ import annotations

import sys

from ablation_cost import ratio_main  # bench/, first on a script's path

UNTIMED = "train.speed_precision=0"


def main(argv: list[str] | None = None) -> int:
    return ratio_main(argv, __doc__.splitlines()[0], ("untimed", [UNTIMED]), ("timed", []),
                      aim=1.10, repeats=2)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
