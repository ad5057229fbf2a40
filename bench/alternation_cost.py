"""What the ablations' speed effects cost to time: the alternations a knee's ablations run
after their last epoch (each ablation of a setting that changes a step's work, as
`search.ablation.ablation_points` plans them, timed against the knee by
`trainables.timing.speed_against_baseline`), each in a trial trained as the ablation phase
trains it, with a neighbour training on the other core as the phase's second trial does.
One process per checkout (`--tree`, default this one; give two to compare code), the
checkouts in alternation (A B, B A, ...), `--rounds` times.

Printed per alternation: its seconds, its rounds of blocks (A B or B A, each one ratio,
`trainables.speed.time_in_alternation`) and the seconds they took (the rest is its fresh
models' start and warm-up), ratio and half width (points of speed); at the end, per
checkout, the alternations' seconds summed per round (median over rounds; and of those in
rounds of blocks), their half widths' median, their rounds of blocks' median and how many
stopped before the nine from which the interval is a median's (`MEDIAN_ROUNDS`), and each
checkout's seconds over the first's.

    python bench/alternation_cost.py [setting=value ...] [--config configs/cats_dogs.yaml]
        [--rounds 2] [--no-neighbour] [--tree PATH ...]   (setting=value: the knee's sampled
        settings, before --tree, which takes every word after it)

The knee defaults to the default search's knee of 2026-11-28 (docs/RESULTS.md, section 39),
where the config samples those settings; sampled settings not given take their first choice.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
KNEE = {"batch_size": 32, "optimizer": "adam", "lr": 0.002016, "adabatch_growth": 2,
        "warmup_epochs": 2, "channels_last": True}  # fmt: skip


def knee_settings(
    config_path: str, given: dict[str, object], left_out: list[str]
) -> list[dict[str, object]]:
    """The configs of the knee's timed ablations (`given` over `KNEE`), each with its
    `speed_baseline`, as the ablation phase's trials get them; `left_out`: sampled settings
    the search leaves out on this machine (`search.devices.leave_out_slow_amp`)."""
    from search.ablation import ablation_points
    from search.config import AblationSection, load_config
    from search.trainable import without_notes
    from trainables.metrics import TIMED_AGAINST_NOTE

    config = load_config(config_path)
    for key in left_out:
        config = config.without_sampled(key, "left out on this machine")
    knee = {key: value for key, value in KNEE.items() if key in config.space} | given
    for key, param in config.space.items():
        if key not in knee and param.kind in ("choice", "grid"):
            knee[key] = param.values[0]
    points = ablation_points([("knee", knee)], config.space, AblationSection(seeds=1), False)
    trials = []
    for point in points:
        if point.get(TIMED_AGAINST_NOTE):
            settings = {**config.train_config(), **without_notes(point)}
            settings["speed_baseline"] = json.loads(point[TIMED_AGAINST_NOTE])
            trials.append(settings)
    return trials


def slow_amp_left_out(config_path: str) -> list[str]:
    """The sampled settings a new search of the config leaves out on this machine
    (`search.devices.leave_out_slow_amp`: AMP where this CPU emulates bf16)."""
    from search.cli import RunOptions
    from search.config import load_config
    from search.devices import leave_out_slow_amp

    on_cpu = load_config(config_path).with_cards(0)  # the bench's trials train on the CPU
    return list(leave_out_slow_amp(on_cpu, RunOptions()).left_out)


def worker(config_path: str, given: dict[str, object], left_out: list[str]) -> None:
    """Train each timed ablation, one thread, printing a JSON row per alternation."""
    import torch

    import trainables.classifier as classifier
    import trainables.timing as timing
    from trainables.data import prepare_data

    seconds: list[float] = []
    timed = classifier.speed_against_baseline

    def clocked(*args, **kwargs):
        started = time.perf_counter()
        try:
            return timed(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    classifier.speed_against_baseline = clocked
    blocks: list[int] = []  # each alternation's rounds of blocks
    in_rounds: list[float] = []  # and its seconds in them (the rest: its fresh models' start)
    alternated = timing.time_in_alternation

    def counted(*args, **kwargs):
        started = time.perf_counter()
        ratio = alternated(*args, **kwargs)
        in_rounds.append(time.perf_counter() - started)
        blocks.append(ratio.rounds)
        return ratio

    timing.time_in_alternation = counted
    torch.set_num_threads(1)
    trials = knee_settings(config_path, given, left_out)
    data = None
    for config in trials:
        settings = classifier.settings_for_trial({**config, "num_threads": 1}, 0.0)
        data = data or prepare_data(settings.data)
        seconds.clear()
        blocks.clear()
        in_rounds.clear()
        last = classifier.fit_classifier(settings, data, lambda metrics, folder: None)
        low, high = last["speed_vs_baseline_low"], last["speed_vs_baseline_high"]
        print(json.dumps({"ablation": json.dumps(config["speed_baseline"]),
                          "seconds": seconds[0], "ratio": last["speed_vs_baseline"],
                          "half_width": (high - low) / 2,
                          "rounds_of_blocks": blocks[0] if blocks else 0,
                          "rounds_s": in_rounds[0] if in_rounds else 0.0}), flush=True)  # fmt: skip


NEIGHBOUR = """
import time, torch
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(), torch.nn.Linear(64, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
images, labels = torch.randn(64, 3, 32, 32), torch.randint(0, 2, (64,))
while True:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()
"""


@contextlib.contextmanager
def beside_a_neighbour(on: bool = True) -> Iterator[None]:
    """A neighbour training on the other core while the block runs (`NEIGHBOUR`), as the
    ablation phase's second trial does; `on` False: nothing beside."""
    beside = subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) if on else None
    try:
        yield
    finally:
        if beside is not None:
            beside.kill()
            beside.wait()


def settings_from(parser: argparse.ArgumentParser, words: list[str]) -> dict[str, object]:
    """`setting=value` words as settings, each value read as YAML; a word without `=` is the
    parser's error (exit 2)."""
    given = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            parser.error(f"a setting is setting=value, got {word!r}")
        given[key] = yaml.safe_load(value)
    return given


def one_round(
    tree: Path, config: str, knee: list[str], left_out: list[str], neighbour: bool
) -> list[dict]:
    """The alternations of `tree`'s code, beside a neighbour on the other core."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(REPO / "bench")])}
    with beside_a_neighbour(neighbour):
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--worker", "--config", config,
             *(f"--leave-out={key}" for key in left_out), *knee],
            env=env, capture_output=True, text=True, cwd=tree,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the alternations at {tree} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/cats_dogs.yaml")
    parser.add_argument("--tree", nargs="+", type=Path, default=[REPO])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-neighbour", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--leave-out", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("knee", nargs="*", help="the knee's sampled settings, setting=value")
    args = parser.parse_args(argv)
    given = settings_from(parser, args.knee)
    if args.worker:
        worker(args.config, given, args.leave_out)
        return 0
    for tree in args.tree:
        if not (tree / "trainables").is_dir():
            parser.error(f"--tree {tree}: not a checkout of this project (no trainables/); "
                         "knee settings go before --tree")  # fmt: skip
    from trainables.speed import MEDIAN_ROUNDS  # the interval a median's from this many

    config = str(Path(args.config).resolve())
    left_out = slow_amp_left_out(config)
    totals: dict[Path, list[float]] = {tree: [] for tree in args.tree}
    widths: dict[Path, list[float]] = {tree: [] for tree in args.tree}
    blocks: dict[Path, list[int]] = {tree: [] for tree in args.tree}
    in_blocks: dict[Path, list[float]] = {tree: [] for tree in args.tree}
    for round_ in range(args.rounds):
        for tree in args.tree if round_ % 2 == 0 else args.tree[::-1]:
            rows = one_round(tree.resolve(), config, args.knee, left_out, not args.no_neighbour)
            for row in rows:
                print(
                    f"{tree}, round {round_ + 1}: {row['ablation']}: {row['seconds']:.2f} s "
                    f"({row.get('rounds_of_blocks', 0)} rounds of blocks in "
                    f"{row.get('rounds_s', math.nan):.2f} s), "
                    f"ratio {row['ratio']:.3f} +-{row['half_width']:.3f}",
                    flush=True,
                )
            totals[tree].append(sum(row["seconds"] for row in rows))
            in_blocks[tree].append(sum(row.get("rounds_s", math.nan) for row in rows))
            widths[tree] += [row["half_width"] for row in rows]
            blocks[tree] += [row.get("rounds_of_blocks", 0) for row in rows]
    first = statistics.median(totals[args.tree[0]])
    for tree in args.tree:
        total = statistics.median(totals[tree])
        print(f"{tree}: alternations {total:.1f} s a round (rounds: "
              f"{', '.join(f'{t:.1f}' for t in totals[tree])}; in their rounds of blocks "
              f"{statistics.median(in_blocks[tree]):.1f} s), half widths' median "
              f"{statistics.median(widths[tree]):.3f}, rounds of blocks' median "
              f"{statistics.median([n for n in blocks[tree] if n] or [0]):g} (fewer than "
              f"{MEDIAN_ROUNDS} in {sum(0 < n < MEDIAN_ROUNDS for n in blocks[tree])} of "
              f"{len(blocks[tree])}), "
              f"{total / first:.2f}x the first")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
